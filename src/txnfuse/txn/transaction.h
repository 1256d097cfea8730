// A transaction: its state, and what it has touched so far (the objects, names and
// handle-row names its undo log covers, the files it opened for writing). TxnManager
// (txn.h) begins, binds, commits and aborts it; requests of it record their undo steps
// into it (recorder.h) under its mutex.
#pragma once
#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "recovery/undo/undo_log.h"
#include "sync/mutex.h"
#include "txnfs/txnfs.h"
#include "txnfuse/txn/inode.h"
#include "txnfuse/txn/interval_set.h"
#include "txnfuse/txn/lock_manager.h"
#include "txnfuse/txn/step_mirror.h"

namespace txnfs {

// What a transaction did to one object; guarded by Txn::mu.
struct TouchedObject {
  bool created = false;       // made by this transaction: nothing to back up
  bool attrs_saved = false;   // an Attrs step records its state before the first change
  bool xattrs_saved = false;  // an Xattrs step holds its xattrs before the first change
  struct stat orig {};        // attributes before the first change
  IntervalSet backed_up;      // ranges already saved by Data steps
  uint32_t stashed = 0;       // names removed by this transaction whose object the
                              // log keeps (each still counts in the backing st_nlink)
  bool dir_removed = false;   // a directory this transaction removed (the log keeps it,
                              // with its links): it shows link count 0, as on XFS
};

struct Txn : LockOwner {
  Txn(uint64_t id, uid_t uid, pid_t pid, unsigned flags)
      : LockOwner(id),
        uid(uid),
        pid(pid),
        flags(flags),
        started(std::chrono::steady_clock::now()),
        started_wall(std::chrono::system_clock::now()) {}

  const uid_t uid;
  const pid_t pid;  // bound thread id, or process id with TXNFS_BIND_PROCESS
  const unsigned flags;
  const std::chrono::steady_clock::time_point started;
  const std::chrono::system_clock::time_point started_wall;  // for its txns row
  ~Txn();
  std::atomic<int> state{TXNFS_ACTIVE};
  std::atomic<int> error{0};  // errno that made it abort-only
  std::atomic<uint64_t> ops{0};
  std::atomic<int64_t> lock_timeout_ms{-1};  // per lock wait; -1: the mount's default

  // Guards everything below (rank 20 in src/sync/lock_order.h: under it a request may
  // take MetaDb's and leaf mutexes; it is never taken inside MetaDb::transaction).
  Mutex mu{LockRank::kTxn};
  std::unique_ptr<UndoLog> log GUARDED_BY(mu);  // created at the first change
  std::unordered_map<uint64_t, TouchedObject> objects GUARDED_BY(mu);  // by nodeid
  // Every (dir nodeid, name) the transaction changed; true while the name holds an object
  // the transaction made there and nothing else changed it since (the kernel's dentry
  // of it then got no lifetime, so a commit need not drop it: see TxnManager::finish).
  std::map<std::pair<uint64_t, std::string>, bool> entries GUARDED_BY(mu);
  struct Unlinked {
    std::string stash;  // name of the stashed object in the log directory
    uint64_t parent;
    std::string name;
  };
  std::multimap<uint64_t, Unlinked> unlinked
      GUARDED_BY(mu);  // by nodeid: every name the transaction
                       // removed (an object may lose several)
  // A copy of `unlinked`, and the log (null before the first change) in *log.
  std::multimap<uint64_t, Unlinked> unlinked_names(UndoLog **log) EXCLUDES(mu) {
    MutexLock g(mu);
    *log = this->log.get();
    return unlinked;
  }
  struct RowName {
    uint64_t nodeid;
    std::optional<uint64_t> parent;
    std::string name;
  };
  std::vector<RowName> row_names GUARDED_BY(mu);  // handle-row names before renames, for abort
  std::atomic<bool> wants_durable{false};         // fsync inside the transaction: commit durably
  // Two-phase commit (TxnManager::prepare): the global id, set once before the round that
  // makes it prepared and never changed; `preparing` tells that round to write its
  // prepared record instead of a commit record. Read by others only once state is
  // TXNFS_PREPARED (or by that round).
  std::string gid;
  std::atomic<bool> preparing{false};
  std::chrono::system_clock::time_point prepared_wall;  // when it became prepared
  // (Both under GroupCommit::gc_mu_.)
  uint64_t commit_seq = 0;                           // lazy commits: position in the commit order
  std::chrono::steady_clock::time_point lazy_since;  // lazy commits: when
  // Its txns row (MetaDb::TxnRow), written off the request path: what TxnManager::
  // mirror_rows last wrote (RowState, set inside mirror_rows' SQLite transaction), and,
  // for a lazy commit, its wall-clock time (µs since the epoch; 0 before) and whether a
  // round made it durable (set under the database mutex, so mirror_rows, which looks
  // under the same mutex, never writes an 'active' row after it). `has_row`: the round
  // left a row to forget once the log is gone (a commit record, or the mirror's row it
  // turned into one); a lazy commit covered by the durable mark alone has none.
  enum RowState : int { kNoRow, kOpenRow, kLazyRow };
  std::atomic<int> row_state{kNoRow};
  std::atomic<int64_t> lazy_wall_us{0};
  std::atomic<bool> durable_recorded{false};
  bool has_row = true;              // (written by the round before after_durable reads it)
  // Its view's nodeid base (slot << 48, fuse/views.h), once a request used the view; 0
  // before. Its requests through the view reach the kernel's inodes of the view.
  std::atomic<uint64_t> view_base{0};
  int pidfd = -1;                   // the owner, watched by the reaper (set before it is shared)
  StepMirror *mirror = nullptr;     // copies its undo steps into SQLite (set before it is shared)
  int commit_error = 0;             // set by the group-commit leader (under GroupCommit::gc_mu_)
  int inflight GUARDED_BY(mu) = 0;  // requests of this transaction being served
  std::string declared GUARDED_BY(mu);  // pieces of a predeclared lock set received so far
  std::unordered_map<uint64_t, InodePtr> opened_for_writing
      GUARDED_BY(mu);  // by nodeid: objects it
                       // opened with write access (txn_writers.cc)
  CondVar idle;        // inflight dropped to 0

  uint64_t id() const { return LockOwner::id(); }
  // Has this transaction changed the object, one that existed before it began (not one
  // it made)? Such an object's state is uncommitted but reachable by others: what the
  // transaction is told about it must not stay in a kernel cache (see Op::attr_timeout).
  bool changed_shared(uint64_t nodeid) EXCLUDES(mu) {
    MutexLock g(mu);
    auto it = objects.find(nodeid);
    return it != objects.end() && !it->second.created;
  }
  // Did this transaction make the object? Until it ends no one else can reach it.
  bool made(uint64_t nodeid) EXCLUDES(mu) {
    MutexLock g(mu);
    auto it = objects.find(nodeid);
    return it != objects.end() && it->second.created;
  }
  // Corrects attributes this transaction reads for what its own log hides.
  void adjust(struct stat &st, uint64_t nodeid) EXCLUDES(mu) {
    MutexLock g(mu);
    auto it = objects.find(nodeid);
    if (it == objects.end()) return;
    if (it->second.stashed) st.st_nlink -= it->second.stashed;
    if (it->second.dir_removed) st.st_nlink = 0;
  }
  bool process_bound() const { return flags & TXNFS_BIND_PROCESS; }
  // Makes the transaction abort-only; later requests fail with `err`.
  void doom(int err) {
    int expected = TXNFS_ACTIVE;
    if (state.compare_exchange_strong(expected, TXNFS_ABORT_ONLY)) error = err;
  }
};

// The txns row of `t` (schema.sql) as MetaDb writes it.
MetaDb::TxnRow txn_row(const Txn &t);

using TxnPtr = std::shared_ptr<Txn>;

}  // namespace txnfs
