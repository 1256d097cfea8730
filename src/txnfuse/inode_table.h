// The inodes the kernel currently knows, keyed by FUSE nodeid.
//
// Invariant: while an Inode is in the table it holds an O_PATH fd to its backing
// object, so the backing inode number cannot be reused by another object; that is
// what makes nodeid = backing inode number safe (see schema.sql). An entry leaves
// the table when the kernel forgets its last lookup.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "mutex.h"

namespace txnfs {

struct Inode {
  int fd = -1;  // O_PATH, O_NOFOLLOW fd to the backing object
  uint64_t nodeid = 0;
  uint64_t generation = 0;
  uint64_t ino = 0;  // backing inode number
  std::string fh;    // backing file handle (see backing.h)
  mode_t type = 0;   // S_IFMT bits
  uint64_t nlookup = 0;  // guarded by the table's mutex (not annotated: another object's)
  // Set once a transaction has changed the object: plain opens of it then bypass the
  // page cache (a transaction's writes move the kernel's shared file size).
  mutable std::atomic<bool> txn_written{false};

  ~Inode();
};

using InodePtr = std::shared_ptr<Inode>;

class InodeTable {
 public:
  // The inode for `nodeid` if the kernel knows it, else null.
  InodePtr get(uint64_t nodeid) EXCLUDES(mu_);
  // Adds one lookup to the entry for inode->nodeid, inserting `inode` if there is
  // none. Returns the entry in the table (which may be an earlier one).
  InodePtr add_lookup(InodePtr inode) EXCLUDES(mu_);
  // Adds one lookup to an entry known to be present (the root, or a held inode).
  void add_lookup_existing(const InodePtr &inode) EXCLUDES(mu_);
  // Drops n lookups; the entry leaves the table when none remain.
  void forget(uint64_t nodeid, uint64_t n) EXCLUDES(mu_);
  size_t size() EXCLUDES(mu_);

 private:
  Mutex mu_{LockRank::kInodeTable};  // a leaf (src/sync/lock_order.h)
  std::unordered_map<uint64_t, InodePtr> map_ GUARDED_BY(mu_);
};

}  // namespace txnfs
