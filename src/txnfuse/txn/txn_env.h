// TxnEnv — what the transaction core shares with the daemon that serves a store: the
// store's directories, its metadata database, the lock manager, the committed view plain
// readers are served from, and the caches in front of the tree that a finished
// transaction must drop. Nothing here knows FUSE.
//
// The daemon's Fs (fuse/fs.h) extends it with the FUSE side (the inode table, the
// operation table's options); TxnManager and the recorder see only this, so the core can
// be built and unit-tested on a real XFS image with no mount at all.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "store/metadb.h"
#include "store/store.h"
#include "txnfuse/txn/committed_view.h"
#include "txnfuse/txn/fd_cache.h"
#include "txnfuse/txn/lock_manager.h"

namespace txnfs {

// Drops what a cache in front of the tree holds about an object or a name (for the
// daemon: the kernel's dentry, attribute, page and listing caches). inode() and entry()
// queue; flush() returns once everything queued before it has been dropped. gone()
// acts at once: an abort removed the object, which its transaction had created, so
// what still refers to it (for the daemon: its Inode, reached by nodeid and by open
// files) must fail from now on instead of reaching the unlinked backing object.
class CacheInvalidator {
 public:
  virtual ~CacheInvalidator() = default;
  // Queue an invalidation. Nothing is sent until the caller's flush() or post(): a
  // commit queues all of its own and sends them itself, without waking a thread for each.
  virtual void inode(uint64_t nodeid) = 0;
  virtual void entry(uint64_t parent, const std::string &name) = 0;
  // Sends everything queued so far, and returns once it has been sent.
  virtual void flush() = 0;
  // Whether invalidating the object `nodeid` waits for no lock of the kernel's: a
  // directory whose listing the kernel never cached (only its attributes go), or an
  // object the kernel does not know. inode_now() sends such an invalidation at once,
  // from any thread -- also one that serves requests (TxnManager::commit_here).
  virtual bool quick(uint64_t nodeid) = 0;
  virtual void inode_now(uint64_t nodeid) = 0;
  // Has another thread send what is queued, for a caller that must not wait for the kernel.
  virtual void post() = 0;
  // Marks the object (nodeid, generation) gone: nothing if the nodeid now names another
  // object (XFS gave its inode number away after the transaction removed it itself).
  virtual void gone(uint64_t nodeid, uint64_t generation) = 0;
  // Whether the cache still holds the object (for the daemon: the kernel has not sent
  // its FORGET). While it does, a removed object may still be in use through it (on
  // XFS an O_PATH fd or a working directory keeps an unlinked object), so the fd cache
  // keeps its fd until it is forgotten (Fs::forget).
  virtual bool known(uint64_t nodeid) = 0;
  // A rollback may have restored the object's xattrs: what the daemon caches of them
  // (Inode::default_acl) is stale. At once, before the transaction's locks go.
  virtual void xattrs_restored(uint64_t nodeid) = 0;
  // Transaction `txn_id` ended: what it saw through a view of its own (fuse/views.h)
  // must answer ESTALE from now on, and the kernel drop it (queued, as inode()).
  virtual void view_ended(uint64_t txn_id) = 0;
  // Every name the kernel caches must be looked up again before it is used. At once,
  // from a request handler (it takes no kernel lock). False: the kernel cannot.
  virtual bool expire_names() = 0;
};

// For a core with no cache in front of it (unit tests, tools).
class NoCache final : public CacheInvalidator {
 public:
  void inode(uint64_t) override {}
  void entry(uint64_t, const std::string &) override {}
  void flush() override {}
  bool quick(uint64_t) override { return true; }
  void inode_now(uint64_t) override {}
  void post() override {}
  void gone(uint64_t, uint64_t) override {}
  bool known(uint64_t) override { return false; }
  void xattrs_restored(uint64_t) override {}
  void view_ended(uint64_t) override {}
  bool expire_names() override { return true; }
};

struct TxnEnv {
  StorePaths paths;
  int tree_fd = -1;     // STORE/tree; also the mount fd for open_by_handle_at
  int backups_fd = -1;  // STORE/.txnfs/backups, where undo logs live
  uint64_t tree_ino = 0;
  bool reflink = true;     // back data up by range clones (else by copying)
  bool undo_sync = false;  // fsync the undo log after every step (for measurement)
  std::unique_ptr<MetaDb> db;
  LockManager locks;
  CommittedView view;                 // committed state of what open transactions changed
  FdCache fds;                        // O_PATH fds of known objects, opened by handle on demand
  CacheInvalidator *cache = nullptr;  // never null once serving (NoCache for none)
  // Plain requests running without locks because no transaction was open when they
  // started; TxnManager::begin waits for them to finish.
  std::atomic<int> unlocked_inflight{0};
  uint64_t recoveries = 0;  // transactions rolled back by recovery at mount

  // A pinned O_PATH fd to the object `i` names; !fd (err() ESTALE) when it is gone.
  InodeFd pin(const Inode &i) { return fds.pin(tree_fd, i); }

  // nodeid the kernel sees for a backing inode number (the tree's root is nodeid 1).
  uint64_t nodeid_of(uint64_t ino) const { return ino == tree_ino ? 1 : ino; }
};

}  // namespace txnfs
