// Crash-injection points: named places in the daemon and in recovery where a test can
// make the process die as if it crashed (docs/crash-model.md, "Crash-injection points").
//
//   TXNFS_CRASH_AT=NAME:COUNT txnfs mount ...
//
// makes the COUNT-th arrival at point NAME (counted over all threads, from 1) call
// _exit(137) at once: no destructors, no stdio or SQLite flushing, no unmounting — what
// the kernel already holds (page cache, XFS's in-memory log, SQLite's WAL file) survives,
// as after `kill -9`. The variable is read once, when the program starts; an unknown
// point name or a malformed count makes every txnfs command refuse to run.
//
// kPoints below is the only list of points: TXNFS_CRASH_POINT(name) does not compile
// for a name that is not in it, and `txnfs crash-points` prints it for test harnesses.
// When the variable is unset a point costs one load and one compare.
#pragma once
#include <cstddef>
#include <string_view>

#include "store/point_table.h"

namespace txnfs::crash {

struct Point {
  const char *name;
  const char *where;  // file and moment
  const char *tests;  // what a crash there tests
};

inline constexpr Point kPoints[] = {
    {"txn.after_begin", "txn.cc, begin: the transaction's id is taken, no undo log yet",
     "nothing to undo; the next daemon hands out ids past the reserved block"},
    {"undo.after_log_dir", "undo_log.cc, UndoLog::create: the log directory exists, empty",
     "an empty log: recovery removes it"},
    {"undo.after_backup",
     "undo_log.cc, backup_range / snapshot_xattrs: the data object `<seq>.d` is written, its "
     "record not yet",
     "a data object without a record: undo ignores it, removal of the log takes it"},
    {"undo.after_record", "undo_log.cc, every record written, before the change it protects",
     "a step whose change never happened: its undo must change nothing"},
    {"undo.after_stash",
     "undo_log.cc, stash: a removed or displaced object was renamed into the log",
     "a removal (or the first half of a rename over a target) is undone: the object is put "
     "back"},
    {"txn.after_change",
     "op.cc, end of every mutating request of a transaction: undo steps and the in-place change "
     "made, reply sent",
     "a transaction cut off between operations is rolled back completely"},
    {"commit.lazy_marked",
     "group_commit.cc, lazy_commit: the lazy-commit marker is in the log, the transaction "
     "queued, its locks not yet released, no reply",
     "a lazy commit that never became durable: rolled back, after the transactions that never "
     "committed and before the earlier lazy ones"},
    {"commit.after_syncfs",
     "group_commit.cc, group_commit: the leader's syncfs returned, no commit record yet "
     "(for durable committers and every queued lazy commit)",
     "everything but the commit record is durable: the transaction is rolled back"},
    {"commit.after_lazy_mark",
     "group_commit.cc, group_commit: the durable mark covers the round's lazy commits and is "
     "fsynced; the durable committers' records not yet written",
     "the lazy commits up to the mark are present, the round's durable commits (no record, "
     "no reply) are rolled back"},
    {"commit.after_record",
     "group_commit.cc, group_commit: commit records written to SQLite, the WAL not yet synced",
     "a commit record that a process crash keeps (and a power cut may lose): present after a "
     "kill, all-or-nothing after a power cut"},
    {"commit.after_wal_sync",
     "group_commit.cc, group_commit: the WAL is synced, no caller has its reply yet",
     "a durable commit record without a reply: the transaction is present"},
    {"commit.after_rows",
     "txn.cc, after_durable (a durable commit, or the round that made a lazy one durable): "
     "handle rows of removed objects updated and their stashed objects unlinked from the "
     "log; the rest of the log not yet queued for removal",
     "a committed log left (partly) whole: recovery discards it, never undoes it"},
    {"abort.mid_undo", "txn.cc, finish (abort): before each undo step (UndoContext::before_step)",
     "an abort cut off part-way: recovery undoes the rest, repeating steps idempotently"},
    {"abort.after_undo",
     "txn.cc, finish (abort): the log is undone and removed, handle-row names not restored, "
     "record not deleted",
     "a record without a log and stale handle-row names: recovery forgets the record, "
     "reconciles the handle table"},
    {"undo.mid_tree",
     "undo_exec.cc, created: before each object below a directory the transaction made is "
     "removed (what it made there has no steps of its own)",
     "a rollback cut off inside a made directory: the next run removes the rest of it"},
    {"log.mid_remove",
     "undo_exec.cc: after each record of an undone log is removed, before each object of a "
     "committed log is (abort, cleanup, recovery)",
     "a log removal cut short: an aborted transaction's remaining steps change nothing, a "
     "committed one's log is discarded, never undone"},
    {"cleanup.after_discard",
     "background.cc, cleaner: committed logs removed, before the syncfs that makes that durable",
     "commit records outlive their logs: a partly removed committed log is discarded"},
    {"cleanup.before_delete_rows",
     "group_commit.cc: a round's syncfs made removed committed logs durable, before their "
     "records are deleted (in the round's SQLite transaction)",
     "records without logs: recovery forgets them"},
    {"recover.before_txn", "recover.cc: before each logged transaction is rolled back or discarded",
     "recovery interrupted between transactions: the next run goes on"},
    {"recover.mid_undo", "recover.cc: before each undo step (UndoContext::before_step)",
     "recovery interrupted inside a rollback: the next run repeats it idempotently"},
    {"recover.after_txn",
     "recover.cc: after a transaction's log is gone, before its handle rows are removed",
     "rows of objects a rolled-back transaction created outlive them: reconciled"},
    {"recover.before_forget",
     "recover.cc: every log gone and synced, before the transaction records are deleted",
     "records without logs after recovery: the next recovery forgets them"},
};

inline constexpr size_t kCount = sizeof kPoints / sizeof kPoints[0];

// Index of a point by name; a compile error for an unknown name.
consteval int index_of(std::string_view name) { return point_index(kPoints, name); }

// The point TXNFS_CRASH_AT armed (-1: none); written once before main().
extern int armed;
// Counts an arrival at the armed point; the COUNT-th one exits the process with 137.
// With TXNFS_PAUSE_AT=NAME:MS instead, every arrival sleeps MS milliseconds and goes on:
// tests use it to hold a thread inside a race window (never in production).
void reached(int index);

// Throws txnfs::Error when TXNFS_CRASH_AT was set but could not be parsed.
void check_environment();

// For unit tests of code that fires points: the `count`-th arrival at `name` calls
// `crash` (which throws, to cut the code off right there) instead of exiting. One
// point at a time, armed from the test's thread; disarm() before the next.
void arm_for_test(std::string_view name, long count, void (*crash)());
void disarm();

}  // namespace txnfs::crash

#define TXNFS_CRASH_POINT(name)                                           \
  do {                                                                    \
    constexpr int txnfs_crash_index_ = ::txnfs::crash::index_of(name);    \
    if (__builtin_expect(::txnfs::crash::armed == txnfs_crash_index_, 0)) \
      ::txnfs::crash::reached(txnfs_crash_index_);                        \
  } while (0)
