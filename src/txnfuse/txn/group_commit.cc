// Group commit (GroupCommit::group_commit; group_commit.h has the invariants): the
// commits that arrive while a leader syncs wait for the next leader, who syncs once for
// all of them. Lazy commits join the lazy queue and do not wait: every round makes them
// durable too (the durable mark), and the flusher runs a round for them when nobody else
// does (GroupCommit::flusher_loop).
#include "txnfuse/txn/group_commit.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <spdlog/spdlog.h>

#include "recovery/undo/undo_record.h"
#include "store/crash_point.h"
#include "store/fault_point.h"
#include "txnfuse/txn/txn_env.h"

namespace txnfs {

GroupCommit::GroupCommit(TxnEnv &env, const TxnLimits &limits,
                         std::function<void(Txn &)> after_durable)
    : env_(env), limits(limits), after_durable_(std::move(after_durable)) {}

GroupCommit::~GroupCommit() { stop(); }

void GroupCommit::start() {
  {
    // Lazy commits number on from the durable mark: a marker at or below it would count
    // as durable after a crash (set_lazy_durable).
    uint64_t mark = lazy_durable_upto(env_.backups_fd);
    MutexLock g(gc_mu_);
    lazy_queue_.start(mark);
    // Tests: lazy commits get commit records, as where the mark is refused.
    if (const char *v = std::getenv("TXNFS_TEST_LAZY_RECORDS"); v && *v == '1')
      lazy_mark_ok_ = false;
  }
  flusher_ = std::thread([this] { flusher_loop(); });
}

void GroupCommit::stop() {
  stopping_ = true;
  { MutexLock g(gc_mu_); }  // the flusher is waiting, or will see stopping_
  flush_cv_.notify_all();
  if (flusher_.joinable()) flusher_.join();  // it makes every lazy commit durable first
}

int GroupCommit::durable_commit(Txn &t) { return group_commit(&t); }

int GroupCommit::sync() { return group_commit(nullptr); }

// Commit order: the sequence number is taken, marked in the log, and the transaction
// queued under gc_mu_, so the lazy queue is in sequence order and the marker of every
// earlier lazy commit was written first (XFS journals the marker before anything that a
// later transaction changes on top of this one: its locks are released after this).
int GroupCommit::lazy_commit(TxnPtr t) {
  UndoLog *log;
  {
    MutexLock g(t->mu);
    log = t->log.get();
  }
  // (No SQLite write: the lazy_commits view gets its row from mirror_rows().)
  count_lazy_stashes(*t, +1);  // before anyone can stat what it removed
  MutexLock l(gc_mu_);
  uint64_t seq = lazy_queue_.last_seq() + 1;
  if (int err = mark_lazy_commit(log->dir_fd(), seq)) {
    l.unlock();
    count_lazy_stashes(*t, -1);
    return err;
  }
  t->commit_seq = seq;
  t->lazy_since = std::chrono::steady_clock::now();
  t->lazy_wall_us.store(std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count(),
                        std::memory_order_release);
  lazy_pending_.fetch_add(1, std::memory_order_acq_rel);
  // The flusher waits for the oldest queued commit to come due; only the first one
  // queued gives it a new deadline (a wake-up per commit costs the caller a context switch).
  bool first = lazy_queue_.empty();
  lazy_queue_.push(std::move(t));
  TXNFS_CRASH_POINT("commit.lazy_marked");
  if (first) flush_cv_.notify_one();
  return 0;
}

void GroupCommit::count_lazy_stashes(Txn &t, int sign) {
  std::vector<std::pair<uint64_t, uint32_t>> links;  // as Txn::adjust counts them
  {
    MutexLock g(t.mu);
    for (auto &[nodeid, o] : t.objects)
      if (o.stashed) links.emplace_back(nodeid, o.stashed);
  }
  if (links.empty()) return;
  MutexLock g(lazy_mu_);
  for (auto [n, k] : links) {
    uint32_t &c = lazy_stashed_[n];
    c = uint32_t(int64_t(c) + sign * int64_t(k));
    if (c == 0) lazy_stashed_.erase(n);
  }
}

// syncfs makes every effect and undo record durable; then the lazy commits queued when
// the leader started become durable together, by the durable mark (set_lazy_durable:
// the highest of their sequence numbers, fsynced), and the durable committers' commit
// records are written and the database synced: neither is ever durable before the
// effects it vouches for, and the lazy commits a durable one may have built on are
// durable before its record. Rounds run one at a time, each marking a contiguous piece
// of the commit order, so the durable lazy commits stay a prefix of it. The same syncfs
// makes the cleaner's removals of committed logs durable, so the round also deletes
// their records (background.cc). A round that only the lazy-commit timer asked for, with
// no records to write or forget, does not touch SQLite. Where the mark is refused, lazy
// commits get commit records in the round's SQLite transaction instead, in commit
// order: SQLite's WAL keeps a prefix of its transactions after a crash.
int GroupCommit::group_commit(Txn *t, Round why) {
  MutexLock l(gc_mu_);
  uint64_t ticket = ++gc_requested_;
  if (t) gc_queue_.push_back(t);
  if (why == Round::kAsked) gc_rows_ = true;
  int mine = 0;
  while (gc_done_ < ticket) {
    if (gc_leader_) {
      gc_cv_.wait(gc_mu_);
      continue;
    }
    gc_leader_ = true;
    std::vector<Txn *> batch;
    batch.swap(gc_queue_);
    // (A cleaner's round alone leaves them queued; one asked for while it runs takes them.)
    if (why != Round::kCleaner || gc_rows_) lazy_queue_.take_for_round();
    std::vector<TxnPtr> lazy = lazy_queue_.in_round();
    // Records to forget: the logs of these were removed before this syncfs starts.
    std::vector<uint64_t> forget, forget_now;
    forget.swap(forget_after_sync_);
    forget_now.swap(forget_now_);
    uint64_t upto = gc_requested_;
    // A durable commit, fsync or `txnfs sync` returns with the handle rows written to
    // SQLite; a timer's round for lazy commits leaves them in their journal, which its
    // syncfs makes durable (recovery replays it), and skips that SQLite transaction.
    bool rows = gc_rows_;
    gc_rows_ = false;
    bool mark_ok = lazy_mark_ok_;
    l.unlock();
    int err = TXNFS_FAULT("commit.syncfs");
    if (!err && ::syncfs(env_.tree_fd) != 0) err = errno;
    bool marked = false;  // lazy covered by the durable mark, durable now
    if (!err) {
      TXNFS_CRASH_POINT("commit.after_syncfs");
      if (!lazy.empty() && mark_ok) {
        err = TXNFS_FAULT("commit.durable_mark");
        if (!err) err = set_lazy_durable(env_.backups_fd, lazy.back()->commit_seq);
        if (!err && ::fsync(env_.backups_fd) != 0) err = errno;
        if (!err) {
          marked = true;
          TXNFS_CRASH_POINT("commit.after_lazy_mark");
        } else if (lazy_durable_refused(err)) {
          // Commit records instead: for good where trusted xattrs are missing or not
          // allowed, for this round when the disk is full (SQLite may still have room).
          if (err != ENOSPC) {
            spdlog::warn(
                "the durable mark of lazy commits cannot be written ({}): lazy "
                "commits get commit records in SQLite instead",
                std::strerror(err));
            mark_ok = false;
          }
          err = 0;
        } else {
          spdlog::error("writing the durable mark of lazy commits: {}", std::strerror(err));
        }
      }
    }
    if (!err) {
      if (!forget.empty()) TXNFS_CRASH_POINT("cleanup.before_delete_rows");
      try {
        // A lazy commit the mark covers has a row only if mirror_rows wrote one (it looks
        // under the database mutex): that row becomes its commit record, forgotten with
        // its log like any other; most have none, and the round writes nothing for them.
        std::vector<Txn *> records;
        env_.db->locked([&] {
          for (auto &b : lazy) {
            b->has_row = !marked || b->row_state.load() != Txn::kNoRow;
            if (b->has_row) records.push_back(b.get());
            if (marked) b->durable_recorded = true;
          }
        });
        if (!records.empty() || !batch.empty() || !forget.empty() || !forget_now.empty() || rows) {
          env_.db->transaction([&] {
            for (Txn *b : records) {
              env_.db->record_committed_txn(txn_row(*b));
              b->durable_recorded = true;  // (under the database mutex: mirror_rows)
            }
            for (Txn *b : batch) {
              if (b->preparing.load()) {
                env_.db->record_prepared_txn(txn_row(*b), b->gid);
                continue;
              }
              env_.db->record_committed_txn(txn_row(*b));
              if (!b->gid.empty()) env_.db->forget_prepared(b->id());  // it was prepared
            }
            for (uint64_t id : forget) env_.db->delete_txn(id);
            for (uint64_t id : forget_now) env_.db->delete_txn(id);
          });
          TXNFS_CRASH_POINT("commit.after_record");
          env_.db->sync(rows);
          TXNFS_CRASH_POINT("commit.after_wal_sync");
        }
      } catch (const std::exception &e) {
        spdlog::error("writing commit records: {}", e.what());
        err = EIO;
      }
    }
    if (!err) {
      for (auto &b : lazy) {
        // For a moment stat counts the links again (too many, never too few), until
        // after_durable drops them.
        count_lazy_stashes(*b, -1);
        after_durable(*b);
      }
      if (!lazy.empty()) lazy_flushes_++;
    } else if (!lazy.empty()) {
      spdlog::error("{} lazily committed transactions are not durable yet: {}", lazy.size(),
                    std::strerror(err));
    }
    l.lock();
    if (!mark_ok) lazy_mark_ok_ = false;
    if (!err) {
      lazy_pending_.fetch_sub(lazy.size(), std::memory_order_acq_rel);
    } else {
      // (If only the database's sync failed, deleting them again changes nothing.)
      forget_after_sync_.insert(forget_after_sync_.end(), forget.begin(), forget.end());
      forget_now_.insert(forget_now_.end(), forget_now.begin(), forget_now.end());
      // They stay committed and in commit order; the next round tries again.
      for (auto &b : lazy) b->durable_recorded = false;
      lazy_queue_.give_back();
      // (The flusher may be waiting for a first commit to queue: this round's are.)
      if (!lazy.empty()) flush_cv_.notify_one();
    }
    lazy_queue_.end_round();
    for (Txn *b : batch) b->commit_error = err;
    gc_err_ = err;
    if (upto >= ticket) mine = err;
    gc_done_ = upto;
    gc_leader_ = false;
    gc_cv_.notify_all();
  }
  if (t) return t->commit_error;
  return mine ? mine : gc_err_;
}

// Makes lazy commits durable at most limits.lazy_flush after they were made, in a
// round of their own when no durable commit or sync() came first; at stop, all of them.
void GroupCommit::flusher_loop() {
  MutexLock l(gc_mu_);
  while (true) {
    while (!stopping_ && lazy_queue_.empty()) flush_cv_.wait(gc_mu_);
    if (lazy_queue_.empty()) return;  // stopping, nothing pending
    if (!stopping_) {
      auto due = lazy_queue_.front()->lazy_since + limits.lazy_flush;
      if (std::chrono::steady_clock::now() < due) {
        flush_cv_.wait_until(gc_mu_, due);
        continue;
      }
    }
    l.unlock();
    if (group_commit(nullptr, Round::kFlusher) != 0) {
      // The store cannot be synced (the error is logged): try again a little later.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    l.lock();
    if (stopping_ && !lazy_queue_.empty() && gc_err_ != 0) return;  // give up at stop
  }
}

void GroupCommit::forget_after_sync(const std::vector<uint64_t> &ids) {
  MutexLock l(gc_mu_);
  forget_after_sync_.insert(forget_after_sync_.end(), ids.begin(), ids.end());
}

void GroupCommit::forget_now(uint64_t id) {
  MutexLock l(gc_mu_);
  forget_now_.push_back(id);
}

bool GroupCommit::forget_records_done() {
  MutexLock l(gc_mu_);
  return forget_now_.empty() && forget_after_sync_.empty();
}

bool GroupCommit::forget_records() {
  std::vector<uint64_t> now_ids;
  bool after_sync;
  {
    MutexLock l(gc_mu_);
    now_ids.swap(forget_now_);
    after_sync = !forget_after_sync_.empty();
  }
  if (!now_ids.empty()) {
    try {
      env_.db->transaction([&] {
        for (uint64_t id : now_ids) env_.db->delete_txn(id);
      });
    } catch (const std::exception &e) {
      spdlog::error("deleting transaction records: {}", e.what());
      MutexLock l(gc_mu_);
      forget_now_.insert(forget_now_.end(), now_ids.begin(), now_ids.end());
    }
  }
  // A round deletes forget_after_sync_ after its syncfs (and forget_now_ again).
  if (after_sync) group_commit(nullptr, Round::kCleaner);
  return forget_records_done();
}

uint64_t GroupCommit::oldest_lazy_ms() {
  MutexLock g(gc_mu_);
  auto now = std::chrono::steady_clock::now();
  const Txn *oldest = lazy_queue_.oldest();
  if (!oldest) return 0;
  return uint64_t(
      std::chrono::duration_cast<std::chrono::milliseconds>(now - oldest->lazy_since).count());
}

}  // namespace txnfs
