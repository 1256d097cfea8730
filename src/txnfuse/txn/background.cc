// TxnManager's background threads: the reaper aborts transactions whose owner exited;
// the cleaner discards the logs of committed transactions, then has their records
// forgotten.
#include <chrono>
#include <deque>
#include <vector>

#include <spdlog/spdlog.h>

#include "recovery/undo/undo_exec.h"
#include "store/crash_point.h"
#include "txnfuse/txn/txn.h"
#include "txnfuse/txn/txn_env.h"

namespace txnfs {

// Aborts transactions whose owner (thread or process) has exited: the binding watches
// the owner of every bound transaction (TxnBinding::exited).
void TxnManager::reaper_loop() {
  while (!stopping_) {
    for (uint64_t id : binding_.exited(1000)) {
      TxnPtr t = find(id);
      if (t && abort(0, id) == 0) {  // (ENOENT: it had finished already)
        spdlog::info("owner {} of transaction {} exited; aborted it", t->pid, id);
        owner_exits_++;
      }
    }
  }
}

// Discards the logs of committed transactions; their records go once a syncfs has made
// the removals durable (a record must never vanish before its log): in the next
// group-commit round, which syncs anyway, or in a round of the cleaner's own when none
// came within kForgetDelay.
void TxnManager::cleaner_loop() {
  using Clock = std::chrono::steady_clock;
  const auto never = Clock::time_point::max();
  Clock::time_point forget_by = never;  // records wait to be forgotten by then
  MutexLock g(clean_mu_);
  while (true) {
    while (to_discard_.empty() && !stopping_ && !forget_wake_) {
      if (forget_by == never) {
        clean_cv_.wait(clean_mu_);
      } else if (Clock::now() < forget_by) {
        clean_cv_.wait_until(clean_mu_, forget_by);
      } else {
        break;
      }
    }
    forget_wake_ = false;
    forget_armed_ = true;  // after_durable need not wake us for records without logs
    std::deque<Discard> batch;
    batch.swap(to_discard_);
    bool stop = stopping_;
    g.unlock();
    UndoContext ctx{env_.tree_fd, env_.backups_fd, {}};
    std::vector<uint64_t> gone;  // only these lose their commit records
    bool discarded = false;
    for (auto [id, has_row] : batch) {
      try {
        discard_log(ctx, id);
        discarded = true;
        // (A lazy commit covered by the durable mark alone has no record to forget.)
        if (has_row) gone.push_back(id);
      } catch (const std::exception &e) {
        // The record (or the mark) stays: without it, recovery would undo a committed
        // transaction.
        spdlog::error("discarding log of transaction {}: {}", id, e.what());
      }
    }
    if (discarded) TXNFS_CRASH_POINT("cleanup.after_discard");
    if (!gone.empty()) gc_.forget_after_sync(gone);
    if (forget_by == never) forget_by = Clock::now() + kForgetDelay;
    if (stop || Clock::now() >= forget_by) {
      if (gc_.forget_records()) {
        {
          MutexLock c(clean_mu_);
          forget_armed_ = false;
        }
        // A record queued while forget_armed_ was still true is seen here; one queued
        // from now on wakes us.
        forget_by = never;
        if (!gc_.forget_records_done()) forget_by = Clock::now() + kForgetDelay;
      } else {
        forget_by = Clock::now() + kForgetDelay;  // a failed round: again later
      }
    }
    g.lock();
    if (forget_by != never) forget_armed_ = true;
    if (stop && to_discard_.empty()) return;  // (what is left, the next recovery forgets)
  }
}

}  // namespace txnfs
