// Group commit (TxnManager::durable_commit): the commits that arrive while a leader
// syncs wait for the next leader, who syncs once for all of them.
#include <unistd.h>

#include <cerrno>
#include <vector>

#include <spdlog/spdlog.h>

#include "store/crash_point.h"
#include "txnfuse/txn/txn.h"
#include "txnfuse/txn/txn_env.h"

namespace txnfs {

// syncfs makes every effect and undo record durable, then the commit records are
// written and the database synced: a commit record is never durable before the
// effects it vouches for. Everyone queued when a leader starts shares its syncs.
int TxnManager::durable_commit(Txn &t) {
  MutexLock l(gc_mu_);
  uint64_t ticket = ++gc_requested_;
  gc_queue_.push_back(&t);
  while (gc_done_ < ticket) {
    if (gc_leader_) {
      gc_cv_.wait(gc_mu_);
      continue;
    }
    gc_leader_ = true;
    std::vector<Txn *> batch;
    batch.swap(gc_queue_);
    uint64_t upto = gc_requested_;
    l.unlock();
    int err = ::syncfs(env_.tree_fd) == 0 ? 0 : errno;
    if (!err) {
      TXNFS_CRASH_POINT("commit.after_syncfs");
      try {
        env_.db->transaction([&] {
          for (Txn *b : batch) env_.db->set_txn_state(b->id(), "committed");
        });
        TXNFS_CRASH_POINT("commit.after_record");
        env_.db->sync();
        TXNFS_CRASH_POINT("commit.after_wal_sync");
      } catch (const std::exception &e) {
        spdlog::error("writing commit records: {}", e.what());
        err = EIO;
      }
    }
    l.lock();
    for (Txn *b : batch) b->commit_error = err;
    gc_done_ = upto;
    gc_leader_ = false;
    gc_cv_.notify_all();
  }
  return t.commit_error;
}

}  // namespace txnfs
