// Transactions: their state, what they have touched, and the manager that begins,
// binds, commits and aborts them.
//
// Binding (TxnBinding, txn_binding.h): a transaction belongs to one thread, or to a
// process and all processes it starts. Every FUSE request carries the caller's thread
// id; bound() maps it to the open transaction it belongs to, or to none (a plain request).
//
// Commit (see docs/crash-model.md): wait for the transaction's in-flight requests;
// syncfs the store (every effect and every undo record durable); write the commit
// record; fdatasync the database. Concurrent commits share the syncs (GroupCommit,
// group_commit.h). Then locks are released and the undo log is discarded in the
// background.
//
// Lazy commit (TXNFS_COMMIT_LAZY): the transaction gets the next commit sequence number,
// written into its undo log as a marker, joins the lazy queue (lazy_queue.h), and is
// final and visible at once (locks released); a later group-commit round makes it
// durable (group_commit.h has the invariants). Here: no plain (non-transactional)
// change lands on the tree while a lazy commit is not durable: a plain mutating request
// calls sync() first (a rollback of the lazy transaction would otherwise undo it, or
// fail on it).
// Abort: run the undo executor on the log (the same code as crash recovery).
#pragma once
#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sync/mutex.h"
#include "txnfs/txnfs.h"
#include "txnfuse/txn/group_commit.h"
#include "txnfuse/txn/inode.h"
#include "txnfuse/txn/step_mirror.h"
#include "txnfuse/txn/transaction.h"
#include "txnfuse/txn/txn_binding.h"
#include "txnfuse/txn/txn_limits.h"

namespace txnfs {

struct TxnEnv;

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
  TxnPtr bound(pid_t tid) EXCLUDES(binding_.mu_) { return binding_.bound(tid); }
  bool any_open() const { return binding_.any_open(); }
  // Did an open transaction make the object? Until it commits, no one else may reach
  // it, not even by file handle.
  bool made_by_open(uint64_t nodeid) EXCLUDES(binding_.mu_) {
    bool made = false;
    binding_.for_each([&](const TxnPtr &t) { made = made || t->made(nodeid); });
    return made;
  }

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
  int sync() EXCLUDES(gc_.gc_mu_) { return gc_.sync(); }
  // Lazily committed transactions that are not durable yet.
  bool lazy_pending() const { return gc_.lazy_pending(); }
  // Corrects the link count of an object that logs of lazy commits, not yet durable,
  // still link (a durable commit drops those links before it returns).
  void adjust_lazy(struct stat &st, uint64_t nodeid) EXCLUDES(gc_.lazy_mu_) {
    gc_.adjust_lazy(st, nodeid);
  }
  // A plain request is about to change the tree: lazy commits must be durable first.
  int before_plain_change() { return lazy_pending() ? sync() : 0; }
  int abort(uid_t uid, uint64_t id);
  // Two-phase commit (prepare.cc, docs/cluster.md). prepare() makes `id` prepared under
  // the global id `gid`: its effects and undo log durable, then its prepared record
  // (schema.sql), in a group-commit round; it keeps its locks, leaves its owner
  // (TxnBinding::detach) and its view. EINVAL: a bad gid; EEXIST: gid is prepared here
  // already; EIO: the round failed and it was rolled back. resolve() (root only) commits
  // or rolls back the prepared transaction `gid`: ENOENT if there is none (resolved
  // already); a commit that cannot be made durable answers EIO and leaves it prepared --
  // once decided, a commit is never turned into a rollback.
  int prepare(uid_t uid, uint64_t id, const std::string &gid);
  int resolve(uid_t uid, const std::string &gid, bool commit);
  struct Prepared {
    uint64_t id;
    std::string gid;
    std::chrono::system_clock::time_point since;
  };
  std::vector<Prepared> prepared() EXCLUDES(binding_.mu_);
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
  // The counters in the Prometheus text format (status.cc): commits, aborts, prepared
  // transactions, lock waits, and a histogram of commit latency.
  std::string metrics_text() EXCLUDES(binding_.mu_);

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
  void mirror_rows() EXCLUDES(binding_.mu_, gc_.gc_mu_);
  // Copies undo steps into undo_records for inspection (null before start()).
  StepMirror *mirror() { return mirror_.get(); }

 private:
  TxnPtr find(uint64_t id) EXCLUDES(binding_.mu_) { return binding_.find(id); }
  // What commit and prepare begin with: `id` if `uid` may end it, its mapped pages
  // written back, and its state moved from active to committing; else null and *err
  // (ENOENT, EPERM, or the error that made it abort-only).
  TxnPtr start_commit(uid_t uid, uint64_t id, int *err);
  // `here`: the caller serves requests (commit_here); the invalidations are sent at
  // once if all are quick, else queued, *here set, and left to end_later().
  int finish(TxnPtr t, bool commit, bool lazy = false, bool *here = nullptr);
  // What the kernel must drop once `t` ends (see finish): (nodeid, name) pairs, an
  // empty name for the object itself.
  using Invalidations = std::vector<std::pair<uint64_t, std::string>>;
  Invalidations end_invalidations(Txn &t, bool commit) REQUIRES(t.mu);
  // What a commit does once its record is durable: the log's links to objects whose
  // names it removed go, and the log is queued for removal.
  void after_durable(Txn &t);
  void update_rows(Txn &t);
  void reaper_loop();
  void cleaner_loop();

  TxnEnv &env_;
  // Lock hierarchy: src/sync/lock_order.h (binding_.mu_ 10, gc_.gc_mu_ 40, clean_mu_ 41).
  TxnBinding binding_;  // the open transactions, and the reaper's watch on their owners
  GroupCommit gc_;      // durable commits, the lazy queue and its flusher
  Mutex writers_mu_{LockRank::kWriters};                                         // a leaf
  std::unordered_map<int, std::weak_ptr<Txn>> writers_ GUARDED_BY(writers_mu_);  // by backing fd

  // Background: owner-exit reaper and log cleaner.
  std::atomic<bool> stopping_{false};
  std::thread reaper_, cleaner_;
  std::unique_ptr<StepMirror> mirror_;
  Mutex clean_mu_ ACQUIRED_AFTER(gc_.gc_mu_){LockRank::kCleaner};
  CondVar clean_cv_;
  struct Discard {
    uint64_t id;
    bool has_row;  // its record is forgotten once the log's removal is durable
  };
  std::deque<Discard> to_discard_ GUARDED_BY(clean_mu_);
  // Records without logs wake the cleaner only while it does not know records wait.
  bool forget_armed_ GUARDED_BY(clean_mu_) = false;
  bool forget_wake_ GUARDED_BY(clean_mu_) = false;
  // Records of discarded logs wait for a group-commit round; the cleaner runs one of its
  // own when none came within kForgetDelay.
  static constexpr std::chrono::milliseconds kForgetDelay{100};

  std::atomic<uint64_t> commits_{0}, aborts_{0}, owner_exits_{0}, lazy_commits_{0},
      lazy_commits_here_{0}, prepares_{0}, resolved_commits_{0}, resolved_aborts_{0};
  // Commit latency (commit(): from the call to the outcome): commit_in_[k] counts the
  // commits that took at most kCommitBuckets[k] seconds and more than the bucket before
  // (one increment per commit; metrics_text() sums them into Prometheus's cumulative
  // buckets); slower ones are only in commit_count_.
  static constexpr double kCommitBuckets[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                              0.05,   0.1,   0.25,  0.5,   1.0,  2.5};
  std::atomic<uint64_t> commit_in_[std::size(kCommitBuckets)] = {};
  std::atomic<uint64_t> commit_count_{0}, commit_us_sum_{0};
  void count_commit(std::chrono::steady_clock::duration took);
};

}  // namespace txnfs
