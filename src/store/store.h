// The on-disk layout of a txnfs store and the operations on it as a whole.
//
//   STORE/tree/           the visible tree: a mount shows exactly this directory
//   STORE/.txnfs/         internal area, never reachable through a mount
//        meta.db          SQLite database (WAL): handle table, later undo records
//        backups/         backup copies/clones of data an open transaction changed
//        lock             flock()ed by the daemon serving the store
//        handles.journal  handle rows not yet in meta.db (store/handle_journal.h)
#pragma once
#include <string>

#include "store/unique_fd.h"

namespace txnfs {

struct StorePaths {
  std::string root, tree, internal, db, backups, lock, handle_journal;
  static StorePaths of(const std::string &store);
};

// True when the directory `name` in `dirfd` (AT_FDCWD: a path) has no entries.
bool dir_is_empty(int dirfd, const char *name);

// True when `dir`'s file system can clone file ranges (FICLONERANGE).
bool supports_reflink(const std::string &dir);

// Makes `store` (missing, or an empty directory) a txnfs store. Refuses a file
// system without reflink unless allow_copy_backups. Throws Error.
void init_store(const std::string &store, bool allow_copy_backups);

// Throws Error unless `store` looks like a txnfs store (tree, internal area, db).
void check_store_layout(const StorePaths &paths);

// Exclusive, non-blocking flock on STORE/.txnfs/lock, held while the object lives
// (and by children forked while it is held). Throws Error if another process holds it.
class StoreLock {
 public:
  explicit StoreLock(const StorePaths &paths);

 private:
  UniqueFd fd_;
};

}  // namespace txnfs
