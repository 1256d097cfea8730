// Shared mappings inside a transaction (FUSE_DIRECT_IO_ALLOW_MMAP).
//
// A transaction's opens bypass the kernel's page cache (FOPEN_DIRECT_IO), but mmap
// cannot: a shared mapping's pages live in the page cache of the object, read in by
// page faults (READs of whole pages from the faulting thread, which is the
// transaction's) and written back by the kernel in WRITEs that name no caller (pid 0)
// and go through some writable open file of the object. So:
//   - such a WRITE belongs to the transaction that opened the file it comes through
//     (writer_of), as long as that transaction is open -- or abort-only or aborting:
//     it is refused then, and its pages are dropped, never written as plain data;
//   - a commit first makes the kernel write back every object the transaction opened
//     for writing and may have pages of (write_back_mapped: an inode invalidation
//     launders dirty pages, and waits for their WRITEs, which join the transaction);
//   - an abort drops those pages after the rollback (finish()): their WRITEs come back
//     refused, and the next fault reads the rolled-back data;
//   - once the transaction committed, pages a program still dirties in the mapping are
//     plain writes, as a write(2) through the same descriptor would be.
// Munmap (and process exit) writes a mapping back before it returns (FUSE closing a vma),
// so `txnfs run` commits what its command wrote through mappings.
// Invariant: no byte a transaction wrote through a mapping reaches the tree outside
// that transaction, unless it committed.
#include "txnfuse/txn/txn.h"
#include "txnfuse/txn/txn_env.h"

namespace txnfs {

void TxnManager::opened_for_writing(int fd, const TxnPtr &t, InodePtr inode) {
  {
    MutexLock g(t->mu);
    t->opened_for_writing.emplace(inode->nodeid, std::move(inode));
  }
  MutexLock g(writers_mu_);
  writers_[fd] = t;
}

void TxnManager::closed(int fd) {
  MutexLock g(writers_mu_);
  writers_.erase(fd);
}

TxnPtr TxnManager::writer_of(int fd) {
  TxnPtr t;
  {
    MutexLock g(writers_mu_);
    auto it = writers_.find(fd);
    if (it != writers_.end()) t = it->second.lock();
  }
  if (!t) return nullptr;
  int s = t->state.load();
  return s == TXNFS_ACTIVE || s == TXNFS_ABORT_ONLY || s == TXNFS_ABORTED ? t : nullptr;
}

void TxnManager::write_back_mapped(Txn &t) {
  bool any = false;
  {
    MutexLock g(t.mu);
    for (auto &[nodeid, i] : t.opened_for_writing)
      if (i->paged.load(std::memory_order_relaxed)) {
        env_.cache->inode(nodeid);
        // Its mapping through the transaction's view has pages of their own.
        if (uint64_t view = t.view_base.load()) env_.cache->inode(view | nodeid);
        any = true;
      }
  }
  if (any) env_.cache->flush();  // (waited for holding nothing: its WRITEs take t.mu)
}

}  // namespace txnfs
