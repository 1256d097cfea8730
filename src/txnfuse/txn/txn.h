// Transactions: their state, what they have touched, and the manager that begins,
// binds, commits and aborts them.
//
// Binding: a transaction belongs to one thread, or to a process and all processes
// it starts. Every FUSE request carries the caller's thread id; bound() maps it to
// the open transaction it belongs to, or to none (a plain request).
//
// Commit (see docs/crash-model.md): wait for the transaction's in-flight requests;
// syncfs the store (every effect and every undo record durable); write the commit
// record; fdatasync the database. Concurrent commits share the syncs (group
// commit). Then locks are released and the undo log is discarded in the background.
//
// Lazy commit (TXNFS_COMMIT_LAZY): the transaction gets the next commit sequence number,
// written into its undo log as a marker, joins the lazy queue, and is final and visible
// at once (locks released); a later group-commit round makes it durable — the flusher's
// within limits.lazy_flush, or any earlier durable commit or sync(). Invariants:
//   - the lazy queue is in commit-sequence order, and every round writes the commit
//     records of the whole queue it took together with its durable committers, in one
//     SQLite transaction: the durable commit records are always a prefix of the commit
//     order (a durable commit makes every earlier lazy one durable);
//   - the undo log (and every object stashed in it) of a lazy transaction stays whole
//     until its commit record is durable: recovery can still roll it back;
//   - no plain (non-transactional) change lands on the tree while a lazy commit is not
//     durable: a plain mutating request calls sync() first (a rollback of the lazy
//     transaction would otherwise undo it, or fail on it).
// Abort: run the undo executor on the log (the same code as crash recovery).
#pragma once
#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <optional>
#include <unordered_map>
#include <vector>

#include "txnfuse/txn/inode.h"
#include "txnfuse/txn/interval_set.h"
#include "txnfuse/txn/lock_manager.h"
#include "sync/mutex.h"
#include "txnfuse/txn/step_mirror.h"
#include "txnfuse/txn/txn_limits.h"
#include "txnfs/txnfs.h"
#include "recovery/undo/undo_log.h"

namespace txnfs {

struct TxnEnv;

// What a transaction did to one object; guarded by Txn::mu.
struct TouchedObject {
  bool created = false;       // made by this transaction: nothing to back up
  bool attrs_saved = false;   // an Attrs step records its state before the first change
  bool xattrs_saved = false;  // an Xattrs step holds its xattrs before the first change
  struct stat orig{};         // attributes before the first change
  IntervalSet backed_up;      // ranges already saved by Data steps
  uint32_t stashed = 0;       // names removed by this transaction whose object the
                              // log keeps (each still counts in the backing st_nlink)
};

struct Txn : LockOwner {
  Txn(uint64_t id, uid_t uid, pid_t pid, unsigned flags)
      : LockOwner(id), uid(uid), pid(pid), flags(flags),
        started(std::chrono::steady_clock::now()),
        started_wall(std::chrono::system_clock::now()) {}

  const uid_t uid;
  const pid_t pid;         // bound thread id, or process id with TXNFS_BIND_PROCESS
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
  std::multimap<uint64_t, Unlinked> unlinked GUARDED_BY(mu);  // by nodeid: every name the transaction
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
  std::atomic<bool> wants_durable{false};  // fsync inside the transaction: commit durably
  uint64_t commit_seq = 0;  // lazy commits: position in the commit order (under gc_mu_)
  std::chrono::steady_clock::time_point lazy_since;  // lazy commits: when (under gc_mu_)
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
  bool has_row = true;  // (written by the round before after_durable reads it)
  int pidfd = -1;               // the owner, watched by the reaper (set before it is shared)
  StepMirror *mirror = nullptr;  // copies its undo steps into SQLite (set before it is shared)
  int commit_error = 0;         // set by the group-commit leader (under TxnManager::gc_mu_)
  int inflight GUARDED_BY(mu) = 0;  // requests of this transaction being served
  std::string declared GUARDED_BY(mu);  // pieces of a predeclared lock set received so far
  std::unordered_map<uint64_t, InodePtr> opened_for_writing GUARDED_BY(mu);  // by nodeid: objects it
                                               // opened with write access (txn_writers.cc)
  CondVar idle;                 // inflight dropped to 0

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
    if (it != objects.end() && it->second.stashed) st.st_nlink -= it->second.stashed;
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

class TxnManager {
 public:
  explicit TxnManager(TxnEnv &env);
  ~TxnManager();
  // Starts the background threads (owner reaper, log cleaner). Call after fork.
  void start();
  void stop();

  TxnLimits limits;

  // The open transaction a request from thread `tid` belongs to, or null. Cheap when
  // no transaction is open.
  TxnPtr bound(pid_t tid);
  bool any_open() const { return open_count_.load(std::memory_order_acquire) > 0; }

  int begin(uid_t uid, pid_t caller_tid, unsigned flags, pid_t pid, uint64_t *id);
  // After a begin, and before its reply: requests that started without locks while no
  // transaction was open (Op::start) must finish before the new transaction can change
  // anything they touch. They are being served on other threads already, so the wait
  // is short; a thread that reads requests hands it to the control pool all the same
  // (ops_ctl.cc), and most begins find nothing to wait for.
  bool unlocked_quiet() const;
  void wait_unlocked();

  // fsync/fdatasync from a transaction's thread returns at once: commit makes every
  // effect durable, and an effect of a transaction that aborts or dies is undone
  // whether or not it reached the disk (docs/crash-model.md). It asks for durability,
  // though: the transaction commits durably even if its commit asks to be lazy.
  bool defers_fsync(pid_t caller_tid) {
    TxnPtr t = any_open() ? bound(caller_tid) : nullptr;
    if (t) t->wants_durable = true;
    return t != nullptr;
  }
  // flags: TXNFS_COMMIT_LAZY or 0 (durable).
  int commit(uid_t uid, uint64_t id, unsigned flags = 0);
  // A lazy commit run by a thread that serves requests (ops_ctl.cc), which must not wait
  // for a request queued behind it or for a kernel lock such a request may hold. It runs
  // here only if none of it can: no shared mapping to write back (its WRITEs would queue
  // behind this one), and nothing for the kernel to drop but the attributes of
  // directories whose listings it never cached (CacheInvalidator::quick) -- a transaction
  // that only made objects in directories others had not listed. (Its requests still in
  // flight are served by other threads; finish() waits for them.) Otherwise kNo, and
  // nothing is done: commit() on the control pool. kDone: *err is the outcome. kLater
  // (the commit failed and was rolled back here, or the kernel came to list a directory
  // meanwhile): the kernel's invalidations are queued; end_later(*later) on the control
  // pool, then reply *err.
  enum class Here { kNo, kDone, kLater };
  Here commit_here(uid_t uid, uint64_t id, unsigned flags, int *err, TxnPtr *later);
  void end_later(Txn &t);
  // Makes every lazy commit made so far durable (txnfs sync, plain fsync, a plain change
  // while lazy commits are pending). 0 or the errno of the failed sync.
  int sync() EXCLUDES(gc_mu_);
  // Lazily committed transactions that are not durable yet.
  bool lazy_pending() const { return lazy_pending_.load(std::memory_order_acquire) > 0; }
  // Corrects the link count of an object that logs of lazy commits, not yet durable,
  // still link (a durable commit drops those links before it returns).
  void adjust_lazy(struct stat &st, uint64_t nodeid) EXCLUDES(lazy_mu_) {
    if (!lazy_pending()) return;
    MutexLock g(lazy_mu_);
    auto it = lazy_stashed_.find(nodeid);
    if (it != lazy_stashed_.end() && st.st_nlink >= it->second) st.st_nlink -= it->second;
  }
  // A plain request is about to change the tree: lazy commits must be durable first.
  int before_plain_change() { return lazy_pending() ? sync() : 0; }
  int abort(uid_t uid, uint64_t id);
  int info(uid_t uid, uint64_t id, struct txnfs_info *out);
  int set_lock_timeout(uid_t uid, uint64_t id, uint32_t ms);
  // The transaction `id` if `uid` may use it (else null and *err: ENOENT, EPERM).
  TxnPtr get(uid_t uid, uint64_t id, int *err);
  // How long a lock wait of `t` (null: a plain request) may last.
  std::chrono::milliseconds lock_timeout(const Txn *t) const {
    int64_t ms = t ? t->lock_timeout_ms.load(std::memory_order_relaxed) : -1;
    return ms >= 0 ? std::chrono::milliseconds(ms) : limits.lock_timeout;
  }
  std::string status_json();

  // Request accounting: a request of `t` starts/ends. enter() fails with the error
  // that ended the transaction's usefulness (EDEADLK for abort-only, ENOENT once
  // committing/aborting, EFBIG/ENOSPC-like for limits).
  int enter(Txn &t) EXCLUDES(t.mu);
  void leave(Txn &t) EXCLUDES(t.mu);

  // Shared mappings (mmap) inside a transaction. The kernel writes a mapping's dirty
  // pages back in WRITEs of its own (no caller: pid 0), through some writable open file
  // of the object; txn_writers.cc has the whole argument.
  //   - opened_for_writing(): a transaction opened `fd` (backing fd, the open's fi->fh)
  //     with write access; closed(): the kernel released it.
  //   - writer_of(fd): the transaction such a WRITE belongs to: the one that opened
  //     `fd`, while it is open or abort-only or being aborted (its pages must never
  //     land outside it); null once it commits (later pages are plain writes).
  //   - write_back_mapped(t): before `t` commits, makes the kernel write back the dirty
  //     pages of every object `t` opened for writing that may have pages cached
  //     (Inode::paged); the WRITEs arrive as `t`'s while this waits.
  void opened_for_writing(int fd, const TxnPtr &t, InodePtr inode) EXCLUDES(writers_mu_);
  void closed(int fd) EXCLUDES(writers_mu_);
  TxnPtr writer_of(int fd) EXCLUDES(writers_mu_);
  void write_back_mapped(Txn &t) EXCLUDES(t.mu);

  uint64_t commits() const { return commits_; }
  // Writes the txns rows that the status views show (schema.sql) and that begin and a
  // lazy commit leave out: of transactions open or lazily committed since the last call.
  // Called by the mirror thread every StepMirror::kInterval, before the undo steps.
  void mirror_rows() EXCLUDES(mu_, gc_mu_);
  // Copies undo steps into undo_records for inspection (null before start()).
  StepMirror *mirror() { return mirror_.get(); }

 private:
  TxnPtr find(uint64_t id) EXCLUDES(mu_);
  // `here`: the caller serves requests (commit_here); the invalidations are sent at
  // once if all are quick, else queued, *here set, and left to end_later().
  int finish(TxnPtr t, bool commit, bool lazy = false, bool *here = nullptr);
  // What the kernel must drop once `t` ends (see finish): (nodeid, name) pairs, an
  // empty name for the object itself.
  using Invalidations = std::vector<std::pair<uint64_t, std::string>>;
  Invalidations end_invalidations(Txn &t, bool commit) REQUIRES(t.mu);
  int durable_commit(Txn &t) EXCLUDES(gc_mu_);
  // One group-commit round at a time: makes `t` (if any) durable, and every lazy commit
  // queued before the round unless only the cleaner asked for it. Who asks: a commit,
  // fsync or sync (kAsked: kept handle rows are written to SQLite), the flusher
  // (kFlusher: rows stay in their journal, MetaDb::sync) or the cleaner (kCleaner:
  // records of discarded logs are forgotten, lazy commits stay queued, so that only
  // --lazy-flush-ms or a request for durability makes them durable).
  enum class Round { kAsked, kFlusher, kCleaner };
  int group_commit(Txn *t, Round why = Round::kAsked) EXCLUDES(gc_mu_);
  int lazy_commit(TxnPtr t) EXCLUDES(gc_mu_);
  // What a commit does once its record is durable: the log's links to objects whose
  // names it removed go, and the log is queued for removal.
  void after_durable(Txn &t);
  void update_rows(Txn &t);
  void flusher_loop();
  void unbind(Txn &t);
  void reaper_loop();
  void cleaner_loop();
  TxnPtr lookup_process(pid_t tid) EXCLUDES(mu_);

  TxnEnv &env_;
  // Lock hierarchy: src/sync/lock_order.h (mu_ 10, gc_mu_ 40, clean_mu_ 41).
  Mutex mu_{LockRank::kTxnManager};  // guards the maps
  std::unordered_map<uint64_t, TxnPtr> by_id_ GUARDED_BY(mu_);
  std::unordered_map<pid_t, TxnPtr> by_thread_ GUARDED_BY(mu_);   // thread-bound
  std::unordered_map<pid_t, TxnPtr> by_process_ GUARDED_BY(mu_);  // process-bound, by pid
  // tid -> (epoch, txn)
  std::unordered_map<pid_t, std::pair<uint64_t, TxnPtr>> proc_cache_ GUARDED_BY(mu_);
  uint64_t epoch_ GUARDED_BY(mu_) = 0;  // bumps when the set of process-bound transactions changes
  std::atomic<int> open_count_{0};

  // Group commit: a leader syncs for everyone who arrived before it started.
  Mutex gc_mu_ ACQUIRED_AFTER(mu_){LockRank::kGroupCommit};
  CondVar gc_cv_;
  std::vector<Txn *> gc_queue_ GUARDED_BY(gc_mu_);
  uint64_t gc_requested_ GUARDED_BY(gc_mu_) = 0, gc_done_ GUARDED_BY(gc_mu_) = 0;
  bool gc_leader_ GUARDED_BY(gc_mu_) = false;
  bool gc_rows_ GUARDED_BY(gc_mu_) = false;  // someone but the flusher asked for the round
  int gc_err_ GUARDED_BY(gc_mu_) = 0;  // the last round's error
  std::deque<TxnPtr> lazy_queue_ GUARDED_BY(gc_mu_);  // lazy commits, commit order
  uint64_t commit_seq_ GUARDED_BY(gc_mu_) = 0;       // last lazy commit's sequence number
  // The durable mark (set_lazy_durable) can be written here; false after it was refused:
  // lazy commits then get commit records, as durable ones do.
  bool lazy_mark_ok_ GUARDED_BY(gc_mu_) = true;
  std::atomic<uint64_t> lazy_pending_{0};  // lazy commits not durable (queued or in a round)
  std::deque<TxnPtr> lazy_in_round_ GUARDED_BY(gc_mu_);  // taken by the running round
  // Records to forget (docs/crash-model.md, *Commit*, step 6): of committed transactions whose
  // logs the cleaner removed (deleted only after a syncfs made the removal durable), and
  // of transactions that had no log (deleted whenever). The next group-commit round
  // deletes both in its SQLite transaction; the cleaner runs a round of its own when
  // none came within kForgetDelay.
  std::vector<uint64_t> forget_after_sync_ GUARDED_BY(gc_mu_);
  std::vector<uint64_t> forget_now_ GUARDED_BY(gc_mu_);
  static constexpr std::chrono::milliseconds kForgetDelay{100};
  Mutex lazy_mu_{LockRank::kLazyStash};  // a leaf
  std::unordered_map<uint64_t, uint32_t> lazy_stashed_ GUARDED_BY(lazy_mu_);  // nodeid -> links
  // Adds (+1) or removes (-1) the links t's log holds on objects whose names it removed.
  void count_lazy_stashes(Txn &t, int sign) EXCLUDES(lazy_mu_, t.mu);
  Mutex writers_mu_{LockRank::kWriters};  // a leaf
  std::unordered_map<int, std::weak_ptr<Txn>> writers_ GUARDED_BY(writers_mu_);  // by backing fd
  CondVar flush_cv_;  // the flusher: a lazy commit arrived, or stopping
  std::thread flusher_;

  // Background: owner-exit reaper and log cleaner.
  std::atomic<bool> stopping_{false};
  // The reaper's epoll set: wake_fd_ (data 0, stopping) and every open transaction's
  // pidfd (data: its id), added and removed under mu_ with the transaction's binding,
  // so beginning and ending a transaction wake no thread.
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: stopping
  std::thread reaper_, cleaner_;
  std::unique_ptr<StepMirror> mirror_;
  Mutex clean_mu_ ACQUIRED_AFTER(gc_mu_){LockRank::kCleaner};
  CondVar clean_cv_;
  struct Discard {
    uint64_t id;
    bool has_row;  // its record is forgotten once the log's removal is durable
  };
  std::deque<Discard> to_discard_ GUARDED_BY(clean_mu_);
  // Records without logs wake the cleaner only while it does not know records wait.
  bool forget_armed_ GUARDED_BY(clean_mu_) = false;
  bool forget_wake_ GUARDED_BY(clean_mu_) = false;
  // Forgets the records of forget_now_ (and, after a syncfs, forget_after_sync_) unless a
  // group-commit round already did; true when none are left waiting.
  bool forget_records() EXCLUDES(gc_mu_);
  bool forget_records_done() EXCLUDES(gc_mu_);

  std::atomic<uint64_t> commits_{0}, aborts_{0}, owner_exits_{0}, lazy_commits_{0},
      lazy_flushes_{0}, lazy_commits_here_{0};
};

}  // namespace txnfs
