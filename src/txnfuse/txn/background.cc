// TxnManager's background threads: the reaper aborts transactions whose owner exited;
// the cleaner discards the logs of committed transactions, then has their records
// forgotten.
#include <sys/epoll.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <vector>

#include <spdlog/spdlog.h>

#include "recovery/undo/undo_exec.h"
#include "store/crash_point.h"
#include "txnfuse/txn/txn.h"
#include "txnfuse/txn/txn_env.h"

namespace txnfs {

// Aborts transactions whose owner (thread or process) has exited: begin adds the
// owner's pidfd to epoll_fd_ (data: the transaction's id), unbind removes it.
void TxnManager::reaper_loop() {
  while (!stopping_) {
    epoll_event evs[64];
    int n = ::epoll_wait(epoll_fd_, evs, 64, 1000);
    for (int k = 0; k < n; k++) {
      uint64_t id = evs[k].data.u64;
      if (id == 0) {  // wake_fd_: stopping
        uint64_t v;
        [[maybe_unused]] auto r = ::read(wake_fd_, &v, sizeof v);
        continue;
      }
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
    if (!gone.empty()) {
      MutexLock l(gc_mu_);
      forget_after_sync_.insert(forget_after_sync_.end(), gone.begin(), gone.end());
    }
    if (forget_by == never) forget_by = Clock::now() + kForgetDelay;
    if (stop || Clock::now() >= forget_by) {
      if (forget_records()) {
        {
          MutexLock c(clean_mu_);
          forget_armed_ = false;
        }
        // A record queued while forget_armed_ was still true is seen here; one queued
        // from now on wakes us.
        forget_by = never;
        if (!forget_records_done()) forget_by = Clock::now() + kForgetDelay;
      } else {
        forget_by = Clock::now() + kForgetDelay;  // a failed round: again later
      }
    }
    g.lock();
    if (forget_by != never) forget_armed_ = true;
    if (stop && to_discard_.empty()) return;  // (what is left, the next recovery forgets)
  }
}

bool TxnManager::forget_records_done() {
  MutexLock l(gc_mu_);
  return forget_now_.empty() && forget_after_sync_.empty();
}

bool TxnManager::forget_records() {
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

}  // namespace txnfs
