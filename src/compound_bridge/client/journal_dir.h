// JournalDir: the local half of a journal (journal.h) -- its directory, lock, state and
// entries (file formats: journal_format.h). Knows nothing of the server.
//
// Invariants (checked when the directory is opened; repaired where a crash of the client
// explains them, an Error otherwise):
//  - every kept entry's and the pending entry's sequence number is > state().durable
//    (entries <= durable are left over from a sync that stopped before removing them:
//    removed);
//  - at most one entry is pending, and it is the latest (a pending N beside a kept N is
//    left over from a finished send: removed);
//  - next() is above every sequence number ever used.
// Only one process uses a journal at a time: the constructor waits for flock(DIR/lock).
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "compound_bridge/client/journal_format.h"

namespace txnfs::nfs {

class JournalDir {
 public:
  // Opens DIR; a missing DIR (whose parent exists) or an empty one becomes a new
  // journal. Throws Error for anything else that is not a journal.
  explicit JournalDir(const std::string &dir);
  ~JournalDir();
  JournalDir(const JournalDir &) = delete;
  JournalDir &operator=(const JournalDir &) = delete;

  const std::string &path() const { return dir_; }
  const JournalState &state() const { return state_; }
  void save_state(const JournalState &s);

  const std::set<uint64_t> &kept() const { return kept_; }  // ascending
  std::optional<uint64_t> pending() const { return pending_; }
  // The sequence number the next new COMPOUND gets.
  uint64_t next() const;

  JournalEntry load(uint64_t seq, bool pending) const;
  // Saves E as kept or pending (a kept E replaces E's pending file, if any).
  void save(const JournalEntry &e, bool pending);
  void remove(uint64_t seq, bool pending);
  // The pending entry becomes kept, as it is.
  void keep_pending();

 private:
  void write_file(const std::string &name, std::string_view bytes);
  void unlink_file(const std::string &name);
  void sync_dir();
  void scan();

  std::string dir_;
  int dir_fd_ = -1;
  int lock_fd_ = -1;
  JournalState state_;
  std::set<uint64_t> kept_;
  std::optional<uint64_t> pending_;
};

}  // namespace txnfs::nfs
