// `txnfs status`'s data: every open transaction and the manager's counters, as JSON.
#include <chrono>
#include <vector>

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
                        {"lazy_commits_here", lazy_commits_here_.load()}}},
                      {"lazy",
                       {{"not_durable", gc_.not_durable()},
                        {"oldest_ms", oldest_ms},
                        {"flush_ms", uint64_t(limits.lazy_flush.count())}}}};
  return j.dump();
}

}  // namespace txnfs
