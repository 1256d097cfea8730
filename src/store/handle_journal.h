// HandleJournal — changes of the handle table the daemon has made but not yet written
// to SQLite: new rows (an object was made) and removals (an object's last name went).
//
// Each costs a SQLite transaction of its own when written one by one (four b-trees, a
// WAL append): the largest single cost of a plain create or unlink. So the daemon keeps
// them in memory and writes them in batches (MetaDb::flush_handles), and appends each to
// this journal first: one line, one write(2). Invariants:
//   - a change is in the journal before anyone hears of it (the reply comes after
//     put_handle/remove_handle returns), and the journal is cleared only after the
//     changes it held are durable in SQLite (MetaDb::flush_handles(true), or a sync
//     with nothing kept); a killed daemon therefore loses none: the next mount's
//     recovery applies them again, in order (replay_handle_journal), a row only for an
//     object that still exists and has none, a removal only of one that is gone -- so
//     changes that reached the table before the crash are applied again harmlessly;
//   - every other change of the handle table writes the kept ones first, so the table
//     never holds a change that a kept one would undo.
// A group-commit round that only the lazy-commit timer asked for does not write what is
// kept to SQLite: the rows of what it makes durable are durable through the journal,
// which the round's syncfs covers (and MetaDb::sync(false) fdatasyncs where the round
// writes commit records). Between syncs a power cut may lose the tail of both
// (docs/crash-model.md: the next lookup recreates a lost row; fsck reports a row whose
// removal was lost, and --repair drops it).
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
  void append(const HandleChange &change);  // one write(2); throws Error
  void clear();                             // throws Error
  void sync();                              // fdatasync: what was appended survives a power cut

 private:
  explicit HandleJournal(UniqueFd fd, std::string path)
      : fd_(std::move(fd)), path_(std::move(path)) {}
  UniqueFd fd_;
  std::string path_;
};

// One change: a row put (`removal` false) or the removal of row.nodeid's row.
struct HandleChange {
  bool removal = false;
  HandleRow row;
};

std::string encode_handle_line(const HandleChange &change);
std::optional<HandleChange> decode_handle_line(std::string_view line);

// The changes in the journal at `path` that decode, in order (a missing journal is an
// empty one).
std::vector<HandleChange> read_handle_journal(const std::string &path);

// After a crash: applies the journal's changes in order -- a row of an object that
// still exists in the tree and has no row yet, a removal of a row whose object is gone
// -- then empties the journal. Returns how many it applied.
size_t replay_handle_journal(const std::string &path, int tree_fd, MetaDb &db);

}  // namespace txnfs
