// txnfs fsck: does the metadata database agree with the tree?
//
// Checked: every handle row names an object that exists in the tree (by its backing
// handle), with the recorded inode number, generation and type, and its recorded
// name (if any) names that object; every object of the tree has a row; and the
// recovery state is settled: no undo log is left in the backup area (a log means a
// transaction that recovery has yet to roll back or discard), no transaction record
// outlives its transaction, and the backup area holds nothing else. And, without any
// history: the store is not marked damaged (an open row of the damage table: a rollback
// could not restore everything; .txnfs/damaged holds only logs such rows name); no
// object in the tree has a name of an undo log's entry without a row; with no undo log
// left, no object (not a directory) has links outside the tree. One walk of the tree.
//
// Repair (txnfs fsck --repair) first runs recovery, then reconcile_handles(); it never
// clears the damage mark by itself (--accept-damage does, cli_recovery.cc).
#pragma once
#include <string>
#include <vector>

#include "store/metadb.h"
#include "store/store.h"

namespace txnfs {

struct FsckReport {
  std::vector<std::string> problems;  // one line each, human-readable
  uint64_t rows = 0, objects = 0;
  bool clean() const { return problems.empty(); }
};

// Throws Error when the store cannot be read at all.
FsckReport fsck_store(const StorePaths &paths);

// Makes the handle table agree with the tree `tree_fd` (the store's tree, not O_PATH):
// deletes rows whose object is gone or not in the tree, replaces rows whose handle
// leads to another object or whose type is wrong, adds rows for objects without one,
// and sets a recorded name that does not lead to its object to one that does. Returns
// one line per change. The store must not be served while this runs.
std::vector<std::string> reconcile_handles(int tree_fd, MetaDb &db);

}  // namespace txnfs
