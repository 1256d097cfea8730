// UndoLog — appends the undo steps of one open transaction (writer side).
//
// Ordering contract: each append returns only after the step's record (undo_record.h)
// and its data object, if any, exist in the backing file system; the caller makes the in-place
// change afterwards, so XFS's ordered journal makes the record durable first. For
// Removed/Renamed the record is written *before* the object moves into the log
// directory, so a stashed object is never without its record.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "recovery/undo/undo_step.h"
#include "store/unique_fd.h"

namespace txnfs {

class UndoLog {
 public:
  // Creates STORE/.txnfs/backups/<txid>/ (backups_fd: fd of the backups directory);
  // throws Error if it exists already (a log nobody has undone or discarded yet).
  // `reflink` false: ranges are backed up by copying (stores made with
  // --allow-copy-backups); the copy is fdatasync()ed, since unlike a clone it would
  // otherwise not be ordered before the in-place change.
  static std::unique_ptr<UndoLog> create(int backups_fd, uint64_t txid, bool reflink);
  ~UndoLog();  // closes the log directory

  // Records `s` (its seq is assigned here and returned). For Attrs, Linked, Made and
  // Renamed without a displaced target (also RENAME_EXCHANGE). Other kinds have their
  // own calls below; passing them here throws Error.
  uint64_t append(UndoStep s);

  // Data: clones [off, off+len) of the open file `fd` (the object s.obj) into the new
  // data object at the same offsets (block-aligned outward, clipped to the current
  // EOF), then records the step with off/len set to the cloned range. Returns the seq,
  // or 0 when nothing was recorded: len 0, or the range lies wholly at or after EOF
  // (the Attrs step's size undoes such an extension). `fd` may be write-only or
  // O_PATH: it is then reopened for reading. Throws Error (errno inside) on failure.
  uint64_t backup_range(int fd, UndoStep s);

  // Removed / Renamed-with-displaced-target: records the step, then renames
  // (dirfd, name) to "<seq>.d" inside the log directory. Returns 0 or an errno (the
  // record is then deleted again); *seq_out (if given) receives the step's seq.
  int stash(int dirfd, const char *name, UndoStep s, uint64_t *seq_out = nullptr);

  // Xattrs: snapshots every xattr of `fd` (an O_PATH or regular fd of s.obj) onto a
  // new empty data object (a directory for a directory), then records the step.
  uint64_t snapshot_xattrs(int fd, UndoStep s);

  // Called after each step has been recorded (from the recording thread; must not
  // throw). The daemon uses it to mirror steps into the undo_records table.
  using Observer = std::function<void(uint64_t txid, const UndoStep &)>;
  void set_observer(Observer fn) { observer_ = std::move(fn); }

  int dir_fd() const { return dir_fd_.get(); }  // the log directory
  uint64_t txid() const { return txid_; }
  uint64_t steps() const;
  uint64_t backup_bytes() const;

 private:
  UndoLog(UniqueFd dir_fd, uint64_t txid, bool reflink);
  int put_record(uint64_t seq, UndoStep &s);
  void recorded(const UndoStep &s);
  uint64_t write_record(uint64_t seq, UndoStep &s);
  UniqueFd dir_fd_;
  uint64_t txid_;
  bool reflink_;
  struct Counters;
  std::unique_ptr<Counters> c_;
  Observer observer_;
};

// The lazy-commit marker: the xattr "trusted.txnfs.lazy" of a log directory (a symlink
// "lazy" where trusted xattrs are refused, and in logs of earlier daemons), whose value is
// the transaction's commit sequence number (decimal). The daemon writes it when a lazy
// commit makes the transaction final, before its locks are released, so XFS journals it
// before anything a later transaction changes on top of it. Recovery rolls back the
// logs that have no durable commit record: those without a marker first (they never
// committed), then the marked ones in decreasing sequence order. The undo executor
// ignores the marker (a name that is not a record); removing the log removes it.
// 0 or an errno.
int mark_lazy_commit(int log_fd, uint64_t seq);
// The sequence number of backups/<txid>'s marker; nullopt without (or with a garbled) one.
std::optional<uint64_t> lazy_commit_seq(int backups_fd, uint64_t txid);

}  // namespace txnfs
