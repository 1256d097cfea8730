// The on-disk layout of a txnfs store and the operations on it as a whole.
//
//   STORE/tree/           the visible tree: a mount shows exactly this directory
//   STORE/.txnfs/         internal area, never reachable through a mount
//        meta.db          SQLite database (WAL): handle table, later undo records
//        backups/         backup copies/clones of data an open transaction changed
//        lock             flock()ed by the daemon serving the store
//        handles.journal  handle rows not yet in meta.db (store/handle_journal.h)
#pragma once
#include <optional>
#include <string>

#include "store/unique_fd.h"

namespace txnfs {

struct StorePaths {
  std::string root, tree, internal, db, backups, lock, handle_journal, handles_stale;
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

// The handle table may disagree with the tree: a request changed names in the tree
// and then failed to write the rows that follow them (SQLite refused). The change
// stands; the file .txnfs/handles-stale (holding `why`) makes the next recovery
// reconcile the table (reconcile_handles), which then removes it, and fsck report it
// until then. Durable when this returns; never throws (a failure is logged: the rows
// are then reconciled only when some other reason makes recovery run).
void mark_handles_stale(const StorePaths &paths, const std::string &why) noexcept;
// The reason of the mark, or nullopt when the store has none.
std::optional<std::string> handles_stale_reason(const StorePaths &paths);
// Removes the mark (after a reconciliation), durably. Throws Error.
void clear_handles_stale(const StorePaths &paths);

// Exclusive, non-blocking flock on STORE/.txnfs/lock, held while the object lives
// (and by children forked while it is held). Throws Error if another process holds it.
class StoreLock {
 public:
  explicit StoreLock(const StorePaths &paths);

 private:
  UniqueFd fd_;
};

}  // namespace txnfs
