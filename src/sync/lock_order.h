// The lock hierarchy of the txnfs daemon: every internal mutex, in the only order in
// which one thread may hold several of them. A thread that holds a mutex may acquire
// only mutexes further down this list (a strictly greater rank). Mutexes marked
// "leaf" are never held while acquiring another one.
//
//   rank  mutex                        guards
//   ----  ---------------------------  ------------------------------------------------
//    10   TxnBinding::mu_              the maps binding threads/processes to transactions
//                                      (begin() deletes a refused record under it: -> MetaDb)
//    20   Txn::mu                      one transaction's log, touched objects and entries,
//                                      removed names, handle-row names, in-flight count.
//                                      Held while recording undo, which reaches MetaDb,
//                                      CommittedView, StepMirror (via the log's observer)
//                                      and Invalidator (finish)
//    30   MetaDb::mu_ (recursive)      the SQLite connection; transaction(fn) holds it
//                                      while fn runs, so fn may take only leaves below
//   -- leaves --
//    40   GroupCommit::gc_mu_          the group-commit rounds, the lazy queue, records to forget
//    41   TxnManager::clean_mu_        the cleaner's queue of committed logs
//    50   LockManager::mu_             the lock table (and every LockOwner's held/waiting)
//    60   InodeTable::mu_              nodeid -> Inode (and Inode::nlookup)
//    62   Views::mu_                   view slot -> transaction, the kernel's lookups per slot, backing ids
//    65   FdCache::mu_                 backing identity -> cached O_PATH fd, LRU order
//    70   CommittedView::mu_           committed state of entries/objects open txns changed
//    72   ListingSnapshots::mu_        snapshots of plain listings kept for continuations
//                                      (src/txnfuse/fuse/listings.h)
//    80   StepMirror::mu_              undo steps queued for the undo_records table
//    90   Invalidator::mu_             kernel-cache invalidations queued for its thread
//    95   GroupCommit::lazy_mu_        links that logs of lazy commits not yet durable
//                                      still hold on objects (read by getattr)
//    96   TxnManager::writers_mu_      files transactions opened for writing (fd ->
//                                      transaction), for the kernel's writeback of
//                                      their shared mappings
//    97   park::Pool::mu_              jobs queued for the resume and control pools
//                                      (posted to by lock-manager continuations, which a
//                                      finishing transaction runs under Txn::mu)
//    98   MetaDb::ids_mu_              the block of reserved transaction ids (a begin takes
//                                      one without waiting for MetaDb::mu_, which a group
//                                      commit holds across its fdatasync)
//    99   Resolver::mu_                a cluster node's last etcd health check
//                                      (src/txnfuse/txn/resolver.h)
//   100   stall::Registry::mu          the watchdog's registry of request threads
//
// So, for instance, MetaDb::transaction(fn) must never take Txn::mu inside fn: a thread
// in txn_remove holds Txn::mu and calls MetaDb (20 -> 30), and the reverse order
// deadlocked op_rename against it. Read what you need under Txn::mu first.
//
// Waits that are not mutexes have rules of their own:
//   - a lock of the LockManager (an object or entry lock a request waits up to the lock
//     timeout for) is awaited by no thread: a FUSE request that must wait is parked
//     (src/txnfuse/fuse/park.h); the blocking LockManager::acquire, for other callers,
//     waits with no mutex held (it checks this);
//   - Txn::idle, the group commit and Invalidator::flush() are awaited with no mutex held
//     other than the one the condition variable releases;
//   - kernel notifications (fuse_lowlevel_notify_*) are sent only by the Invalidator,
//     holding nothing -- from its thread, or from a flush() on a thread that serves no
//     requests (a commit on the control pool): the kernel may hold a directory lock that
//     a request waiting for us holds. One kind waits for no kernel lock and may be sent
//     from a thread that serves requests: the attributes of a directory whose listing the
//     kernel never cached (Invalidator::inode_now, by a lazy commit: commit_here);
//   - other libraries' mutexes (libfuse, spdlog, SQLite) are leaves below all of ours.
//
// Enforcement: clang's thread-safety analysis checks GUARDED_BY/REQUIRES/EXCLUDES at
// compile time (scripts/test builds build-tsa with -Wthread-safety -Werror); the
// orderings between mutexes of different objects it cannot see, so builds with
// -Dlock_order_check (on for debug builds) also check every acquisition at run time
// against these ranks (src/sync/mutex.h). docs/isolation.md, "Internal locks".
#pragma once
#include <cstdint>

namespace txnfs {

enum class LockRank : uint8_t {
  kTxnBinding = 10,
  kTxn = 20,
  kMetaDb = 30,
  kGroupCommit = 40,
  kCleaner = 41,
  kLockManager = 50,
  kInodeTable = 60,
  kViews = 62,
  kFdCache = 65,
  kCommittedView = 70,
  kListings = 72,
  kStepMirror = 80,
  kInvalidator = 90,
  kLazyStash = 95,
  kWriters = 96,
  kPool = 97,
  kTxnIds = 98,
  kResolver = 99,
  kStallWatchdog = 100,
};

// "Txn::mu" etc.
const char *lock_rank_name(LockRank r);

}  // namespace txnfs
