// CommittedView — the committed state of what open transactions have changed (directory
// entries, and objects' attributes, data ranges and xattrs), so that plain lookups,
// listings, reads and getattrs can show it without waiting for the transactions' locks.
//
// A transaction records an entry's state here (under its X lock on the entry)
// *before* it changes the entry, and forgets its records only after its commit or
// rollback is complete. A reader therefore reads the tree first and this registry
// second: whatever uncommitted change it saw in the tree is overridden here. A
// transaction that finished in between is the one hazard: a commit left in the tree
// what the reader saw, but a rollback restored the tree *after* the reader read it and
// took away the record that would have hidden the rolled-back state. So every reader
// reads again when a transaction was forgotten while it read (until_quiet()); one that saw
// none finish is consistent.
#pragma once
#include <dirent.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sync/mutex.h"
#include "store/unique_fd.h"

namespace txnfs {

struct EntryBefore {
  bool existed = false;
  uint64_t ino = 0;  // the object it named (when it existed)
  std::string fh;    // its backing handle
  mode_t type = 0;
};

// The committed state of an object an open transaction changed: its attributes
// before the first change, and where the data and xattrs it overwrote are kept.
struct ObjectState {
  struct stat st {};
  std::map<uint64_t, std::pair<uint64_t, std::string>> ranges;  // off -> (end, data object)
  std::string xattrs;  // data object with the xattrs, or ""
};

// A reader's copy of it, with its own fd of the transaction's log directory (the
// names in `ranges` and `xattrs` are relative to it).
struct ObjectBefore : ObjectState {
  UniqueFd log;
};

// One name of a committed directory listing.
struct ListedEntry {
  std::string name;
  uint64_t ino;
  mode_t type;          // S_IFMT bits (0: unknown)
  uint32_t cookie = 0;  // the tree's d_off after it (0: not in the tree as listed)
};

// A committed listing: the tree's, with what open transactions changed shown as it was.
struct CommittedListing {
  std::vector<ListedEntry> entries;
  bool changed = false;  // an open transaction had changed the directory's names
};

class CommittedView {
 public:
  // Records the state of (dir, name) before `txid` first changes it; later calls
  // for the same entry by the same transaction keep the first record.
  void record(uint64_t txid, uint64_t dir, const std::string &name, EntryBefore before)
      EXCLUDES(mu_);
  void forget(uint64_t txid) EXCLUDES(mu_);
  std::optional<EntryBefore> before(uint64_t dir, const std::string &name) EXCLUDES(mu_);
  // The directory (nodeid) that held the object with backing inode `ino` before an open
  // transaction moved or removed it, if one did.
  std::optional<uint64_t> committed_parent(uint64_t ino) EXCLUDES(mu_);
  // Every recorded entry of `dir`.
  std::map<std::string, EntryBefore> in_dir(uint64_t dir) EXCLUDES(mu_);
  bool empty() EXCLUDES(mu_);

  // Objects (by nodeid). `note_*` are called before the change they describe.
  void note_attrs(uint64_t txid, uint64_t nodeid, const struct stat &st, int log_fd) EXCLUDES(mu_);
  void note_range(uint64_t nodeid, uint64_t off, uint64_t end, std::string data_object)
      EXCLUDES(mu_);
  void note_xattrs(uint64_t nodeid, std::string data_object) EXCLUDES(mu_);
  // The committed state of `nodeid` if an open transaction changed it. `log` in the
  // copy is a dup() of the log directory's fd: the log may close once this returns.
  std::optional<ObjectBefore> object(uint64_t nodeid) EXCLUDES(mu_);

  // What plain readers are served while transactions are open. Each reads the tree
  // first and this view second (the order the comment at the top makes consistent).
  //
  // Committed bytes of `nodeid` at [off, off+size), read from `fd` (the object) and
  // patched with what an open transaction saved before overwriting; cut at the
  // committed size. 0 and the length in *len, or an errno.
  //
  // A transaction may finish while this reads: the bytes read from the tree before
  // then may be its uncommitted (even half-written) ones, and the saved ranges that
  // would have hidden them go with its log. So a read during which any transaction
  // was forgotten, or that finds a saved range gone, is done again; one that saw no
  // transaction finish is consistent by the order above.
  int read(uint64_t nodeid, int fd, char *buf, size_t size, off_t off, size_t *len) EXCLUDES(mu_);
  // The committed attributes of `nodeid`: fstat of `fd` (the object in the tree),
  // replaced by what an open transaction saved before changing them. Returns false
  // when it replaced them (they may still change: do not cache them). On a failed
  // fstat `st` is left as the caller read it.
  bool attrs(uint64_t nodeid, int fd, struct stat &st) EXCLUDES(mu_);
  // Reads the committed xattrs of `nodeid`: `read(fd)` on `fd` (the object, an O_PATH
  // fd), then, if an open transaction changed them, on the snapshot it saved before
  // (an O_PATH fd too). Returns what the read that counts returned, errno set by it.
  ssize_t read_xattrs(uint64_t nodeid, int fd, const std::function<ssize_t(int)> &read)
      EXCLUDES(mu_);
  // The committed listing of directory `dir` read through `dp` (rewound first): the
  // entries open transactions changed are shown as they were before. When none had
  // changed any, it is the tree's listing as read, its entries in the tree's order with
  // the tree's cookies (by the order at the top, a transaction that changes a name after
  // the reader read it records that after the reader looked).
  CommittedListing listing(uint64_t dir, DIR *dp) EXCLUDES(mu_);
  // The tree's listing through `dp` (rewound first), with its cookies.
  static std::vector<ListedEntry> tree_listing(DIR *dp);

  // Runs `attempt` -- a read of the tree first and of this view second -- until no
  // transaction was forgotten while it ran (see the top of this file). `attempt`
  // returns false to be run again anyway (something a transaction saved was gone: it
  // is being forgotten). Each rerun means another transaction finished meanwhile, so
  // this ends as soon as the mount is quiet for one attempt; the bound only turns a bug
  // into an error instead of a spin. Returns false when it ran out.
  template <typename Attempt>
  bool until_quiet(Attempt &&attempt) {
    for (int k = 0; k < 100000; k++) {
      uint64_t before = forgotten_.load(std::memory_order_acquire);
      if (!attempt()) {
        std::this_thread::yield();
        continue;
      }
      if (forgotten_.load(std::memory_order_acquire) == before) return true;
    }
    return false;
  }

 private:
  // One attempt of listing().
  CommittedListing listing_once(uint64_t dir, DIR *dp) EXCLUDES(mu_);
  // One attempt of read(); EAGAIN when a saved range was gone.
  int read_once(uint64_t nodeid, int fd, char *buf, size_t size, off_t off, size_t *len)
      EXCLUDES(mu_);
  // Transactions forgotten so far (until_quiet() compares it before and after).
  std::atomic<uint64_t> forgotten_{0};
  Mutex mu_{LockRank::kCommittedView};  // a leaf (src/sync/lock_order.h); taken under Txn::mu
  struct Noted {
    uint64_t txid;
    int log_fd;  // the transaction's log directory (its UndoLog owns the fd)
    ObjectState state;
  };
  std::unordered_map<uint64_t, Noted> objects_ GUARDED_BY(mu_);  // by nodeid
  std::unordered_map<uint64_t, std::map<std::string, std::pair<uint64_t, EntryBefore>>> dirs_
      GUARDED_BY(mu_);
  std::unordered_map<uint64_t, std::vector<std::pair<uint64_t, std::string>>> by_txn_
      GUARDED_BY(mu_);
};

}  // namespace txnfs
