// StepMirror — copies undo steps into the undo_records table (schema.sql), so that
// `sqlite3 STORE/.txnfs/meta.db 'SELECT * FROM undo_steps'` shows what each open
// transaction would undo (docs/sql.md).
//
// The copy is for inspection only: the undo log directory is authoritative and is
// what abort and recovery read. Steps are queued by the request threads (a vector
// push under a mutex) and written by one background thread in batches, at most
// kInterval after they were recorded, so the request path never waits for SQLite.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "store/metadb.h"
#include "sync/mutex.h"
#include "recovery/undo/undo_step.h"

namespace txnfs {

class StepMirror {
 public:
  static constexpr std::chrono::milliseconds kInterval{100};

  // before_flush runs first in every flush, outside mu_ (TxnManager::mirror_rows: the
  // txns rows the steps' rows need).
  StepMirror(MetaDb &db, std::function<void()> before_flush)
      : db_(db), before_flush_(std::move(before_flush)) {}
  ~StepMirror() { stop(); }
  void start();
  void stop() EXCLUDES(mu_);  // writes what is queued, then ends the thread

  void add(uint64_t txid, const UndoStep &s) EXCLUDES(mu_);

 private:
  void loop() EXCLUDES(mu_);
  void flush() EXCLUDES(mu_);  // writes every step queued so far (MetaDb, not under mu_)
  MetaDb &db_;
  std::function<void()> before_flush_;
  Mutex mu_{LockRank::kStepMirror};  // a leaf (src/sync/lock_order.h); taken under Txn::mu
  CondVar cv_;
  std::vector<UndoRecordRow> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace txnfs
