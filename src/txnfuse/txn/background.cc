// TxnManager's background threads: the reaper aborts transactions whose owner exited;
// the cleaner discards the logs of committed transactions, then their records.
#include <poll.h>
#include <unistd.h>

#include <deque>
#include <vector>

#include <spdlog/spdlog.h>

#include "recovery/undo/undo_exec.h"
#include "store/crash_point.h"
#include "txnfuse/txn/txn.h"
#include "txnfuse/txn/txn_env.h"

namespace txnfs {

// Aborts transactions whose owner (thread or process) has exited.
void TxnManager::reaper_loop() {
  while (!stopping_) {
    std::vector<pollfd> fds{{wake_fd_, POLLIN, 0}};
    std::vector<TxnPtr> owners;
    {
      MutexLock g(mu_);
      for (auto &[id, t] : by_id_) {
        fds.push_back({t->pidfd, POLLIN, 0});
        owners.push_back(t);
      }
    }
    if (::poll(fds.data(), fds.size(), 1000) <= 0) continue;
    if (fds[0].revents) {
      uint64_t v;
      [[maybe_unused]] auto n = ::read(wake_fd_, &v, sizeof v);
    }
    for (size_t k = 1; k < fds.size(); k++) {
      if (!fds[k].revents) continue;
      TxnPtr t = owners[k - 1];
      if (abort(0, t->id()) == 0) {  // (ENOENT: it had finished already)
        spdlog::info("owner {} of transaction {} exited; aborted it", t->pid, t->id());
        owner_exits_++;
      }
    }
  }
}

// Discards the logs of committed transactions, then (after a syncfs makes the
// removals durable) deletes their records: a record must never vanish before its log.
void TxnManager::cleaner_loop() {
  MutexLock g(clean_mu_);
  while (true) {
    while (!stopping_ && to_discard_.empty()) clean_cv_.wait(clean_mu_);
    if (to_discard_.empty() && stopping_) return;
    std::deque<uint64_t> batch;
    batch.swap(to_discard_);
    g.unlock();
    UndoContext ctx{env_.tree_fd, env_.backups_fd, {}};
    std::vector<uint64_t> gone;  // only these lose their commit records
    for (uint64_t id : batch) {
      try {
        discard_log(ctx, id);
        gone.push_back(id);
      } catch (const std::exception &e) {
        // The record stays: without it, recovery would undo a committed transaction.
        spdlog::error("discarding log of transaction {}: {}", id, e.what());
      }
    }
    TXNFS_CRASH_POINT("cleanup.after_discard");
    if (::syncfs(env_.tree_fd) == 0) {
      TXNFS_CRASH_POINT("cleanup.before_delete_rows");
      try {
        env_.db->transaction([&] {
          for (uint64_t id : gone) env_.db->delete_txn(id);
        });
      } catch (const std::exception &e) {
        spdlog::error("deleting transaction records: {}", e.what());
      }
    }
    g.lock();
  }
}

}  // namespace txnfs
