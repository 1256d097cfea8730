// txnfs fsck: does the metadata database agree with the tree?
//
// Checked: every handle row names an object that exists in the tree (by its backing
// handle), with the recorded inode number, generation and type, and its recorded
// name (if any) names that object; every object of the tree has a row; the backup
// area holds nothing that no transaction owns.
#pragma once
#include <string>
#include <vector>

#include "store.h"

namespace txnfs {

struct FsckReport {
  std::vector<std::string> problems;  // one line each, human-readable
  uint64_t rows = 0, objects = 0;
  bool clean() const { return problems.empty(); }
};

// Throws Error when the store cannot be read at all.
FsckReport fsck_store(const StorePaths &paths);

}  // namespace txnfs
