// Where an undo step's record lives in its log directory (STORE/.txnfs/backups/<txid>/).
//
// A record is an xattr of the log directory, "trusted.txnfs.<seq as 16 hex digits>",
// whose value is encode_step(step). Setting one is a single journaled XFS metadata
// operation, ordered in the journal before any change made after it returns -- the
// property the whole crash argument rests on (docs/crash-model.md) -- and it costs no
// inode: writing and later deleting a symlink record took 15-17 µs each on XFS, an
// xattr 7-8 µs and nothing to delete (it goes with the directory).
//
// The older form, a symlink named by the seq (16 hex digits) whose target is the text,
// is still written when the xattr cannot be (a file system without trusted xattrs, a
// daemon without the privilege, an inode whose xattr space is full) and past
// kMaxXattrRecords records in one log (listxattr(2) returns at most 64 KiB of names),
// and it is what logs of earlier daemons hold. Readers take both; one seq is never stored in both forms.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace txnfs {

// Records of one log kept as xattrs before the rest go to symlinks: 2,000 names of
// 30 bytes + NUL, with the lazy marker, stay under listxattr's 64 KiB.
inline constexpr uint64_t kMaxXattrRecords = 2000;
inline constexpr std::string_view kRecordXattrPrefix = "trusted.txnfs.";

// "trusted.txnfs.0000000000000007" for seq 7.
std::string record_xattr_name(uint64_t seq);

// True (with *seq) when `name` is a symlink record's name: exactly 16 lower-case hex
// digits (step_name()).
bool record_seq(std::string_view name, uint64_t &seq);

// Writes the record `text` of `seq` into the log `log_fd`, as an xattr when
// `as_xattr`, falling back to a symlink when the xattr is refused: a file system without
// trusted xattrs, a daemon without the privilege, or one whose xattr space per inode is
// full (ext4: one block), which *refused (if given) then reports. 0 or an errno
// (nothing written).
int put_record_text(int log_fd, uint64_t seq, const std::string &text, bool as_xattr,
                    bool *refused = nullptr);

struct StoredRecord {
  uint64_t seq;
  std::string text;
};

// Every record of the log `log_fd`, in no particular order. A record that cannot be
// read goes to `problems` (one line each, naming it), never guessed at.
std::vector<StoredRecord> read_records(int log_fd, std::vector<std::string> &problems);

// Deletes the record of `seq`, in whichever form it is. 0, or an errno (ENOENT: none).
int remove_record(int log_fd, uint64_t seq);

// The lazy-commit marker, "trusted.txnfs.lazy" (older logs: a symlink "lazy"), whose
// value is the transaction's commit sequence number in decimal. See undo_log.h.
int put_lazy_marker(int log_fd, uint64_t commit_seq);
std::optional<uint64_t> read_lazy_marker(int log_fd);

// The durable mark of lazy commits: the xattr "trusted.txnfs.lazy_durable" of the backups
// directory, whose value (decimal) is the highest commit sequence number made durable.
// A group-commit round sets it once its syncfs has made every effect of the lazy commits
// it covers durable, and fsyncs the directory before anything depends on it (a commit
// record, the removal of a log): a log whose marker is at most the mark belongs to a
// committed transaction. One xattr per round instead of a SQLite commit record per lazy
// transaction (docs/crash-model.md, Lazy commit). Sequence numbers go on across restarts
// (the daemon counts on from the mark), so no new marker is ever below it.
// set_lazy_durable: 0 or an errno; where the xattr is refused (lazy_durable_refused) the
// daemon writes commit records instead.
int set_lazy_durable(int backups_fd, uint64_t seq);
bool lazy_durable_refused(int err);
// 0 without a mark. Throws on a mark that cannot be read or is garbled: recovery must not
// guess which lazy commits were durable.
uint64_t lazy_durable_upto(int backups_fd);

}  // namespace txnfs
