// HandleJournal — handle rows the daemon has handed out but not yet written to SQLite.
//
// Creating an object costs a handle row (MetaDb::put_handle). Written one by one, each
// row is a SQLite transaction of its own (four b-trees, a WAL append): the largest single
// cost of a plain create. So the daemon keeps fresh rows in memory and writes them in
// batches (MetaDb::flush_handles), and appends each to this journal first: one line,
// one write(2). Invariants:
//   - a row is in the journal before anyone hears of its object (the reply comes after
//     put_handle returns), and the journal is cleared only after the rows it held are
//     in SQLite; a killed daemon therefore loses no row: the next mount's recovery
//     writes back those of objects that still exist (replay_handle_journal);
//   - the journal never holds a row older than the table's: every other change of the
//     handle table writes the pending rows (and clears the journal) first.
// Neither file is synced here, as the WAL is not: a power cut may lose the tail of
// both (docs/crash-model.md: the next lookup recreates such a row).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/metadb.h"
#include "store/unique_fd.h"

namespace txnfs {

class HandleJournal {
 public:
  // Opens (creates) the journal at `path` for appending. Throws Error.
  static std::unique_ptr<HandleJournal> open(const std::string &path);
  void append(const HandleRow &row);  // one write(2); throws Error
  void clear();                       // throws Error

 private:
  explicit HandleJournal(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  UniqueFd fd_;
  std::string path_;
};

std::string encode_handle_line(const HandleRow &row);
std::optional<HandleRow> decode_handle_line(std::string_view line);

// The rows in the journal at `path` that decode (a missing journal is an empty one).
std::vector<HandleRow> read_handle_journal(const std::string &path);

// After a crash: writes the journal's rows of objects that still exist in the tree and
// have no row yet, then empties the journal. Returns how many it wrote. A missing journal
// is an empty one.
size_t replay_handle_journal(const std::string &path, int tree_fd, MetaDb &db);

}  // namespace txnfs
