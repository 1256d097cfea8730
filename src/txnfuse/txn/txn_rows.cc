// The txns rows (schema.sql) of open and lazily committed transactions.
//
// Recovery reads only commit records, which the group-commit round writes
// (group_commit.cc). The other rows exist for the status views (open_transactions,
// lazy_commits, undo_steps) and are written here, by the mirror thread, at most
// StepMirror::kInterval after begin or a lazy commit: neither pays a SQLite write on
// the request path. Invariant: no 'active' row is written once the transaction has
// left that state for good — the check below and the writes that end a row's life
// (the round's commit record, abort's and the cleaner's deletes) happen under the
// database mutex, and each of those happens only after the state it checks changed.
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "txnfuse/txn/txn.h"
#include "txnfuse/txn/txn_env.h"

namespace txnfs {

namespace {

std::string utc(std::chrono::system_clock::time_point t) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  std::time_t secs = std::time_t(us / 1000000);
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03}Z", fmt::gmtime(secs), (us / 1000) % 1000);
}

}  // namespace

MetaDb::TxnRow txn_row(const Txn &t) {
  return MetaDb::TxnRow{t.id(), uint32_t(t.uid), int32_t(t.pid), t.flags, utc(t.started_wall)};
}

void TxnManager::mirror_rows() {
  std::vector<TxnPtr> todo;
  binding_.for_each([&](const TxnPtr &t) {
    if (t->row_state.load() == Txn::kNoRow) todo.push_back(t);
  });
  gc_.for_each_lazy([&](const TxnPtr &t) {
    if (t->row_state.load() != Txn::kLazyRow) todo.push_back(t);
  });
  if (todo.empty()) return;
  std::vector<std::pair<Txn *, int>> written;  // and the state before
  try {
    // row_state changes under the database mutex, where the group-commit round looks
    // (a lazy commit's row becomes its commit record there).
    env_.db->transaction([&] {
      for (auto &t : todo) {
        int s = t->state.load();
        if (s == TXNFS_ACTIVE || s == TXNFS_ABORT_ONLY) {
          if (t->row_state.load() != Txn::kNoRow) continue;
          env_.db->record_open_txn(txn_row(*t));
          written.emplace_back(t.get(), t->row_state.exchange(Txn::kOpenRow));
          continue;
        }
        int64_t lazy_us = t->lazy_wall_us.load(std::memory_order_acquire);
        if (lazy_us == 0 || t->durable_recorded.load()) continue;  // not (or no longer) lazy
        env_.db->record_lazy_txn(
            txn_row(*t),
            utc(std::chrono::system_clock::time_point(std::chrono::microseconds(lazy_us))));
        written.emplace_back(t.get(), t->row_state.exchange(Txn::kLazyRow));
      }
    });
  } catch (const std::exception &e) {
    for (auto [t, before] : written) t->row_state = before;
    // Only the views miss them; the next interval tries again.
    spdlog::warn("txns: {} rows not written: {}", todo.size(), e.what());
  }
}

}  // namespace txnfs
