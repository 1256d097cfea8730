// `txnfs status`'s data: every open transaction and the manager's counters, as JSON.
#include <chrono>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "txnfuse/txn/txn.h"
#include "txnfuse/txn/txn_env.h"

namespace txnfs {

namespace {

const char *state_name(int s) {
  switch (s) {
    case TXNFS_ACTIVE:
      return "active";
    case TXNFS_ABORT_ONLY:
      return "abort-only";
    case TXNFS_COMMITTING:
      return "committing";
    case TXNFS_COMMITTED:
      return "committed";
    case TXNFS_PREPARED:
      return "prepared";
    default:
      return "aborted";
  }
}

}  // namespace

std::string TxnManager::status_json() {
  nlohmann::json txns = nlohmann::json::array();
  std::vector<TxnPtr> all;
  binding_.for_each([&](const TxnPtr &t) { all.push_back(t); });
  for (auto &t : all) {
    struct txnfs_info i;
    if (info(0, t->id(), &i) != 0) continue;
    auto [held, waiting] = env_.locks.counts(*t);
    txns.push_back({{"id", i.id},
                    {"state", state_name(int(i.state))},
                    {"uid", i.owner_uid},
                    {"pid", i.pid},
                    {"flags", i.flags},
                    {"age_ms", i.age_ms},
                    {"ops", i.ops},
                    {"backup_bytes", i.backup_bytes},
                    {"locks_held", held},
                    {"locks_waiting", waiting},
                    {"error", i.error}});
    if (i.state == TXNFS_PREPARED) {  // (gid and the time: set before, never changed)
      txns.back()["gid"] = t->gid;
      txns.back()["prepared_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::system_clock::now() - t->prepared_wall)
                                       .count();
    }
  }
  uint64_t oldest_ms = gc_.oldest_lazy_ms();
  nlohmann::json j = {{"transactions", txns},
                      {"counters",
                       {{"commits", commits_.load()},
                        {"aborts", aborts_.load()},
                        {"owner_exits", owner_exits_.load()},
                        {"deadlocks", env_.locks.deadlocks()},
                        {"timeouts", env_.locks.timeouts()},
                        {"lock_sets", env_.locks.sets()},
                        {"lock_set_waits", env_.locks.set_waits()},
                        {"lock_set_timeouts", env_.locks.set_timeouts()},
                        {"recoveries", env_.recoveries},
                        {"lazy_commits", lazy_commits_.load()},
                        {"lazy_flushes", gc_.lazy_flushes()},
                        {"lazy_commits_here", lazy_commits_here_.load()},
                        {"prepares", prepares_.load()},
                        {"resolved_commits", resolved_commits_.load()},
                        {"resolved_aborts", resolved_aborts_.load()}}},
                      {"lazy",
                       {{"not_durable", gc_.not_durable()},
                        {"oldest_ms", oldest_ms},
                        {"flush_ms", uint64_t(limits.lazy_flush.count())}}}};
  return j.dump();
}

std::string TxnManager::metrics_text() {
  uint64_t prepared = 0, open = 0;
  binding_.for_each([&](const TxnPtr &t) {
    open++;
    if (t->state.load() == TXNFS_PREPARED) prepared++;
  });
  std::string out;
  auto metric = [&](const char *name, const char *type, const char *help, uint64_t v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
  };
  metric("txnfs_commits_total", "counter", "Committed transactions.", commits_.load());
  metric("txnfs_aborts_total", "counter", "Rolled-back transactions.", aborts_.load());
  metric("txnfs_open_transactions", "gauge", "Open transactions, prepared ones included.", open);
  metric("txnfs_prepared_transactions", "gauge", "Prepared transactions (two-phase commit).",
         prepared);
  metric("txnfs_prepares_total", "counter", "Transactions that became prepared.",
         prepares_.load());
  metric("txnfs_lock_waits_total", "counter", "Requests that waited for a lock.",
         env_.locks.parked_total());
  metric("txnfs_lock_timeouts_total", "counter", "Lock waits that timed out.",
         env_.locks.timeouts());
  metric("txnfs_deadlocks_total", "counter", "Deadlocks broken.", env_.locks.deadlocks());
  out += "# HELP txnfs_commit_seconds Time a commit took, from the call to its outcome.\n"
         "# TYPE txnfs_commit_seconds histogram\n";
  uint64_t upto = 0;
  for (size_t k = 0; k < std::size(kCommitBuckets); k++) {
    upto += commit_in_[k].load();
    out += fmt::format("txnfs_commit_seconds_bucket{{le=\"{}\"}} {}\n", kCommitBuckets[k], upto);
  }
  out += fmt::format("txnfs_commit_seconds_bucket{{le=\"+Inf\"}} {}\n", commit_count_.load());
  out += fmt::format("txnfs_commit_seconds_sum {}\n", double(commit_us_sum_.load()) / 1e6);
  out += fmt::format("txnfs_commit_seconds_count {}\n", commit_count_.load());
  return out;
}

}  // namespace txnfs
