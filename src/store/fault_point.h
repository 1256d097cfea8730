// Fault-injection points: named system calls on the store's write, sync and rename paths
// where a test can make the call fail as if the kernel had returned an I/O error
// (docs/crash-model.md, "Fault-injection points"). The companion of crash_point.h:
//
//   TXNFS_FAIL_AT=NAME:COUNT:ERRNO txnfs mount ...     (ERRNO: EIO or ENOSPC)
//   TXNFS_FAIL_AT=NAME:COUNT+:ERRNO                    (that arrival and every later one)
//
// makes the COUNT-th arrival at point NAME (counted over all threads, from 1) fail with
// ERRNO instead of making the call: the caller sees what it would see from a failing disk
// or a full one. The variable is read once, when the program starts; an unknown point, a
// malformed count or another errno makes every txnfs command refuse to run.
//
// kPoints below is the only list of points: TXNFS_FAULT(name) does not compile for a name
// that is not in it, and `txnfs fault-points` prints it for test harnesses. When the
// variable is unset a point costs one load and one compare.
#pragma once
#include <cstddef>
#include <string_view>

#include "store/point_table.h"

namespace txnfs::fault {

struct Point {
  const char *name;
  const char *where;   // file and call
  const char *caller;  // what the caller sees, what must hold
};

inline constexpr Point kPoints[] = {
    {"undo.record",
     "undo_log.cc, put_record: the write of every undo record (fsetxattr of the log, or its "
     "symlinkat fallback), before the change it protects",
     "the request fails with the errno and changes nothing; the transaction is doomed (a "
     "stash's record: the removal fails, the transaction goes on); abort restores all"},
    {"undo.backup",
     "undo_log.cc, backup_range / snapshot_xattrs: the clone (FICLONERANGE) or copy of the "
     "old data, the copy of the old xattrs",
     "the write (or xattr change) fails with the errno and changes nothing; the transaction "
     "is doomed; abort restores all"},
    {"undo.stash", "undo_log.cc, stash: the rename of a removed or displaced object into the log",
     "the removal (or rename over a target) fails with the errno, its record is taken back; "
     "the transaction goes on"},
    {"commit.lazy_marker",
     "undo_log.cc, mark_lazy_commit (from group_commit.cc, lazy_commit): the lazy-commit "
     "marker of the log",
     "the lazy commit fails with EIO and the transaction is rolled back"},
    {"commit.syncfs", "group_commit.cc, group_commit: the round's syncfs of the tree",
     "the round's durable commits fail with EIO and are rolled back; lazy commits stay "
     "queued for the next round; fsync and sync get EIO"},
    {"commit.durable_mark",
     "group_commit.cc, group_commit: the durable mark of the round's lazy commits "
     "(set_lazy_durable) and the fsync of the backups directory",
     "EIO: as commit.syncfs; ENOSPC: the round writes commit records in SQLite instead "
     "and commits"},
    {"db.commit_record",
     "metadb.cc, MetaDb::record_committed_txn: the write of a commit record (SQLite "
     "statement; the round's SQLite transaction rolls back)",
     "the round's durable commits fail with EIO and are rolled back"},
    {"db.sync",
     "metadb.cc, MetaDb::sync: the fsync of SQLite's WAL (also at a block of transaction "
     "ids, at an abort)",
     "a commit whose record is written but not durable fails with EIO and is rolled back "
     "(its record says 'active' again first); an abort rolls back all the same"},
    {"db.handle_name",
     "metadb.cc, MetaDb::set_handle_name / clear_handle_name: the write of the handle row "
     "that follows a rename or a removed link (SQLite statement)",
     "a plain request's change stands and it succeeds, the store is marked "
     "(.txnfs/handles-stale) and the next recovery reconciles the rows; a transaction's "
     "request fails with the errno and dooms it, its abort restores all"},
    {"log.discard",
     "undo_exec.cc, discard_log: the removal of a committed transaction's log (cleaner, "
     "recovery)",
     "nothing the caller sees (the commit is durable); the log and its record stay, and the "
     "next recovery discards them"},
};

inline constexpr size_t kCount = sizeof kPoints / sizeof kPoints[0];

// Index of a point by name; a compile error for an unknown name.
consteval int index_of(std::string_view name) { return point_index(kPoints, name); }

// The point TXNFS_FAIL_AT armed (-1: none); written once before main().
extern int armed;
// Counts an arrival at the armed point: the errno to fail with, or 0. Logs each failure
// it injects (once per arrival, with the point's name).
int reached(int index);

template <int Index>
inline int at() {
  if (__builtin_expect(armed == Index, 0)) return reached(Index);
  return 0;
}

// Throws txnfs::Error when TXNFS_FAIL_AT was set but could not be parsed.
void check_environment();

}  // namespace txnfs::fault

// 0, or the errno the armed point injects at this arrival: `if (int e = TXNFS_FAULT("x"))`.
#define TXNFS_FAULT(name) (::txnfs::fault::at<::txnfs::fault::index_of(name)>())
