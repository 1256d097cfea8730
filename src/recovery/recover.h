// Crash recovery of a store that is not being served: every transaction with an
// undo log but no durable commit record is rolled back, the logs of committed ones
// are discarded, transaction records are forgotten, and -- when there was anything to
// recover -- the handle table is reconciled with the tree (rows of objects that no
// longer exist go, names a rollback moved back are corrected, missing rows are added).
//
// Idempotent and restartable: a crash at any point of it leaves a store that the next
// run recovers the same way (docs/crash-model.md).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "store/metadb.h"
#include "store/store.h"
#include "recovery/undo/undo_exec.h"

namespace txnfs {

struct RecoveryOptions {
  // Roll back logs that inspect_log() finds damaged too (their damaged steps are
  // skipped and reported). Without it recovery refuses such a store, changing nothing.
  bool force = false;
  // Called with a progress line about once a second while recovery runs.
  std::function<void(const std::string &)> progress;
  // The decision for a prepared transaction (the prepared table, docs/cluster.md): true
  // to commit, false to roll back; throws Error if none can be had (recovery then
  // changes nothing). Recovery never decides one itself: without `decide`, a store with
  // a prepared transaction is refused.
  std::function<bool(const MetaDb::PreparedRow &)> decide;
};

struct RecoveryReport {
  uint64_t rolled_back = 0, discarded = 0, steps_undone = 0, steps = 0, bytes_restored = 0;
  uint64_t records_forgotten = 0;         // transaction records deleted
  std::vector<uint64_t> rolled_back_ids;  // in the order rolled back
  std::vector<uint64_t> finished_ids;     // committed: their logs discarded
  uint64_t handles_replayed = 0;          // handle rows written from the journal
  std::vector<std::string> handle_fixes;  // reconcile_handles() changes
  std::vector<std::string> problems;      // steps that could not be undone (force)
  double seconds = 0;
  bool anything() const {
    return rolled_back || discarded || records_forgotten || handles_replayed ||
           !handle_fixes.empty();
  }
};

// Caller holds the store lock. Throws Error if the store cannot be recovered (then
// nothing was changed when the reason is a damaged log and !opts.force).
RecoveryReport recover_store(const StorePaths &paths, MetaDb &db, const RecoveryOptions &opts = {});

// The store's damage mark (the damage table, schema.sql): set when a rollback could not
// restore everything, by recovery and by an abort in the daemon alike.
//
// damage_keeper() is the UndoContext::on_problems hook that sets it: it writes one row
// per problem and syncs the database, then moves the log directory out of backups/ to
// STORE/.txnfs/damaged/<txid> (a new name if that exists), so that whatever a failed
// step had stashed there -- a removed object that could not be put back -- is kept for
// the administrator instead of being deleted with the log. `source` is "recovery" or
// "abort". The mark is durable before the log leaves backups/: a crash in between
// leaves the log, and the next recovery runs it (and records its problems) again.
std::function<void(uint64_t, const UndoResult &)> damage_keeper(const StorePaths &paths, MetaDb &db,
                                                                std::string source);

// STORE/.txnfs/damaged: where damage_keeper() keeps the logs of incomplete rollbacks.
std::string damaged_dir(const StorePaths &paths);

// One line for a damage row: "transaction 5 (recovery, 2026-...): step ... (Data): ...;
// its undo log is kept in STORE/.txnfs/damaged/5".
std::string describe_damage(const StorePaths &paths, const DamageRow &d);

// What to do about a store marked damaged (the hint of mount's and recover's errors).
std::string damage_hint();

// "rolled back 2 transactions (15 operations undone, 8192 bytes restored), finished 1
// committed one, ... in 0.012 s" -- or "nothing to recover".
std::string recovery_summary(const RecoveryReport &r);

// "rolled back 12, 15; finished 9" (at most 20 ids of each, then "and N more"), or ""
// when nothing was rolled back or finished: which transactions recovery decided on, for
// the daemon's log and `txnfs recover`.
std::string recovery_ids(const RecoveryReport &r);

}  // namespace txnfs
