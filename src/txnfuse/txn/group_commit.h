// GroupCommit: makes commits durable, several at a time, and lazy commits durable
// later (docs/crash-model.md, *Commit* and *Lazy commit*).
//
// Durable commit: syncfs the store (every effect and every undo record durable), write
// the commit record, fdatasync the database. The commits that arrive while a leader
// syncs wait for the next leader, who syncs once for all of them (group_commit()).
//
// Lazy commit: the transaction gets the next commit sequence number, written into its
// undo log as a marker, joins the lazy queue (lazy_queue.h), and is final at once; a
// later round makes it durable -- the flusher's within limits.lazy_flush, or any
// earlier durable commit or sync(). Invariants:
//   - every round writes the commit records (or the durable mark) of the whole lazy
//     queue it took together with its durable committers, after its syncfs: the durable
//     commits are always a prefix of the commit order (a durable commit makes every
//     earlier lazy one durable), and no record is durable before the effects it vouches
//     for;
//   - rounds run one at a time (gc_leader_), each marking a contiguous piece of the
//     commit order;
//   - the undo log (and every object stashed in it) of a lazy commit stays whole until
//     its round ran after_durable on it: recovery can still roll it back; until then
//     lazy_stashed_ counts the links its log holds on objects whose names it removed;
//   - lazy_pending_ counts the lazy commits not durable yet (queued or in a round).
// Records to forget (docs/crash-model.md, *Commit*, step 6) wait here for the next round,
// which deletes them in its SQLite transaction; the cleaner (TxnManager) runs a round of
// its own (forget_records) when none comes.
//
// Lock hierarchy (src/sync/lock_order.h): gc_mu_ (rank 40, a leaf below
// TxnBinding::mu_ and MetaDb's) guards the rounds, the lazy queue and the records to
// forget; it is released across syncfs, SQLite and after_durable. lazy_mu_ (95) is a
// leaf of its own, taken by getattr (adjust_lazy). Its order after TxnBinding::mu_ has no
// ACQUIRED_AFTER here (neither class sees the other's mutex): the ranks enforce it at run
// time; TxnManager::clean_mu_ names gc_mu_ as the one before it.
#pragma once
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "sync/mutex.h"
#include "txnfuse/txn/lazy_queue.h"
#include "txnfuse/txn/transaction.h"
#include "txnfuse/txn/txn_limits.h"

namespace txnfs {

struct TxnEnv;

class GroupCommit {
 public:
  // `after_durable`: what a commit does once its record is durable (TxnManager's: the
  // log's links to objects whose names it removed go, and the log is queued for
  // removal); the round runs it for lazy commits.
  GroupCommit(TxnEnv &env, const TxnLimits &limits, std::function<void(Txn &)> after_durable);
  ~GroupCommit();
  GroupCommit(const GroupCommit &) = delete;
  GroupCommit &operator=(const GroupCommit &) = delete;

  // Numbers lazy commits on from the durable mark, and starts the flusher.
  void start() EXCLUDES(gc_mu_);
  // Makes every lazy commit durable (the flusher's last rounds), then stops the flusher.
  void stop() EXCLUDES(gc_mu_);

  // Makes `t` durable (its commit record, in a round). 0 or the round's errno.
  int durable_commit(Txn &t) EXCLUDES(gc_mu_);
  // Makes every lazy commit made so far durable. 0 or the errno of the failed sync.
  int sync() EXCLUDES(gc_mu_);
  // Queues `t` (its log made, no request of it in flight) as the next lazy commit.
  int lazy_commit(TxnPtr t) EXCLUDES(gc_mu_);
  // Lazily committed transactions that are not durable yet.
  bool lazy_pending() const { return lazy_pending_.load(std::memory_order_acquire) > 0; }
  uint64_t not_durable() const { return lazy_pending_.load(); }
  // How long the oldest lazy commit not durable yet has waited (0: none).
  uint64_t oldest_lazy_ms() EXCLUDES(gc_mu_);
  uint64_t lazy_flushes() const { return lazy_flushes_.load(); }
  // Corrects the link count of an object that logs of lazy commits, not yet durable,
  // still link (a durable commit drops those links before it returns).
  void adjust_lazy(struct stat &st, uint64_t nodeid) EXCLUDES(lazy_mu_) {
    if (!lazy_pending()) return;
    MutexLock g(lazy_mu_);
    auto it = lazy_stashed_.find(nodeid);
    if (it != lazy_stashed_.end() && st.st_nlink >= it->second) st.st_nlink -= it->second;
  }
  // fn(const TxnPtr &) for every lazy commit not durable yet, under gc_mu_.
  template <class F>
  void for_each_lazy(F fn) EXCLUDES(gc_mu_) {
    MutexLock g(gc_mu_);
    lazy_queue_.for_each(fn);
  }

  // Records to forget: of committed transactions whose logs the cleaner removed (deleted
  // only after a syncfs made the removal durable), and of transactions that had no log
  // (deleted whenever). The next round deletes both.
  void forget_after_sync(const std::vector<uint64_t> &ids) EXCLUDES(gc_mu_);
  void forget_now(uint64_t id) EXCLUDES(gc_mu_);
  // Forgets the records of forget_now_ (and, after a syncfs, forget_after_sync_) unless a
  // group-commit round already did; true when none are left waiting.
  bool forget_records() EXCLUDES(gc_mu_);
  bool forget_records_done() EXCLUDES(gc_mu_);

 private:
  friend class TxnManager;  // (for its annotations: EXCLUDES(gc_.gc_mu_))
  // One group-commit round at a time: makes `t` (if any) durable, and every lazy commit
  // queued before the round unless only the cleaner asked for it. Who asks: a commit,
  // fsync or sync (kAsked: kept handle rows are written to SQLite), the flusher
  // (kFlusher: rows stay in their journal, MetaDb::sync) or the cleaner (kCleaner:
  // records of discarded logs are forgotten, lazy commits stay queued, so that only
  // --lazy-flush-ms or a request for durability makes them durable).
  enum class Round { kAsked, kFlusher, kCleaner };
  int group_commit(Txn *t, Round why = Round::kAsked) EXCLUDES(gc_mu_);
  void flusher_loop() EXCLUDES(gc_mu_);
  void after_durable(Txn &t) { after_durable_(t); }
  // Adds (+1) or removes (-1) the links t's log holds on objects whose names it removed.
  void count_lazy_stashes(Txn &t, int sign) EXCLUDES(lazy_mu_, t.mu);

  TxnEnv &env_;
  const TxnLimits &limits;
  const std::function<void(Txn &)> after_durable_;

  // Group commit: a leader syncs for everyone who arrived before it started.
  Mutex gc_mu_{LockRank::kGroupCommit};
  CondVar gc_cv_;
  std::vector<Txn *> gc_queue_ GUARDED_BY(gc_mu_);
  uint64_t gc_requested_ GUARDED_BY(gc_mu_) = 0, gc_done_ GUARDED_BY(gc_mu_) = 0;
  bool gc_leader_ GUARDED_BY(gc_mu_) = false;
  bool gc_rows_ GUARDED_BY(gc_mu_) = false;  // someone but the flusher asked for the round
  int gc_err_ GUARDED_BY(gc_mu_) = 0;        // the last round's error
  LazyQueue lazy_queue_ GUARDED_BY(gc_mu_);  // lazy commits, commit order
  // The durable mark (set_lazy_durable) can be written here; false after it was refused:
  // lazy commits then get commit records, as durable ones do.
  bool lazy_mark_ok_ GUARDED_BY(gc_mu_) = true;
  std::atomic<uint64_t> lazy_pending_{0};  // lazy commits not durable (queued or in a round)
  std::vector<uint64_t> forget_after_sync_ GUARDED_BY(gc_mu_);
  std::vector<uint64_t> forget_now_ GUARDED_BY(gc_mu_);
  Mutex lazy_mu_{LockRank::kLazyStash};                                       // a leaf
  std::unordered_map<uint64_t, uint32_t> lazy_stashed_ GUARDED_BY(lazy_mu_);  // nodeid -> links
  CondVar flush_cv_;  // the flusher: a lazy commit arrived, or stopping
  std::atomic<bool> stopping_{false};
  std::thread flusher_;
  std::atomic<uint64_t> lazy_flushes_{0};
};

}  // namespace txnfs
