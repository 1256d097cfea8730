// The undo executor: rolls one transaction back from its log directory. The same
// code serves an abort in the running daemon and `txnfs recover` after a crash.
//
// It reads every record of STORE/.txnfs/backups/<txid>/, undoes them in descending
// sequence order, makes the result durable (syncfs), and only then removes the log
// directory. A crash at any point leaves the log in place, and running the executor
// again finishes the job: each step checks object identity before acting.
//
// A step that cannot be undone (damaged record, missing data object, a name taken
// meanwhile) is reported in UndoResult::problems and skipped; the other steps still
// run, and the log directory is removed all the same -- with whatever a failed step
// had stashed in it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "recovery/undo/undo_step.h"

namespace txnfs {

struct UndoResult {
  uint64_t steps = 0;                 // records found
  uint64_t undone = 0;                // steps that changed something
  uint64_t bytes_restored = 0;        // data bytes put back
  std::vector<BackingId> removed;     // objects the undo deleted (created by the txn)
  std::vector<BackingId> touched;     // objects whose state the undo changed
  std::vector<std::string> problems;  // damaged records, missing data objects
};

struct UndoContext {
  int mount_fd;    // fd (not O_PATH) on the backing file system, for open_by_fh
  int backups_fd;  // fd of STORE/.txnfs/backups
  // Called before each step is undone (crash-injection point hook; may be empty).
  std::function<void(const UndoStep &)> before_step;
  // Called after the undo (and its syncfs), before the log directory is removed, when
  // some step could not be undone (result.problems is not empty). It may move the log
  // away (keep_damaged_log()), and must make the store's damage mark durable first:
  // once the log is gone, nothing else remembers what was not restored. If it throws,
  // the log stays and the exception propagates.
  std::function<void(uint64_t txid, const UndoResult &result)> on_problems = {};
};

// Rolls back transaction `txid` and removes its log directory. A missing directory
// is not an error (nothing to undo). Throws Error only when the backing file system
// fails in a way that makes going on unsafe (EIO, ENOSPC while restoring).
UndoResult undo_transaction(const UndoContext &ctx, uint64_t txid);

// After a commit: removes the log directory (stashed objects die with it), in no
// particular order: what an interrupted removal leaves is garbage only while the commit
// record says so. Idempotent. The removal is not made durable here: keep the commit
// record until something has forced the XFS journal past it (syncfs, or an fsync that
// forces the log), or recovery may find part of a committed log and undo it.
void discard_log(const UndoContext &ctx, uint64_t txid);

// Damage that would keep undo_transaction from restoring everything, found without
// changing anything: unreadable or undecodable records, and Data or Xattrs records
// whose data object is missing or too short (those are written before their records,
// so only a hand outside txnfs removes them). Each problem is one line. Also counts
// the records into *steps (if given). A missing log directory has no problems.
std::vector<std::string> inspect_log(int backups_fd, uint64_t txid, uint64_t *steps = nullptr);

// Transaction ids that have a log directory, ascending.
std::vector<uint64_t> logged_transactions(int backups_fd);

}  // namespace txnfs
