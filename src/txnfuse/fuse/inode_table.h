// The inodes the kernel currently knows, keyed by FUSE nodeid. An entry leaves the
// table when the kernel forgets its last lookup (see txn/inode.h for what an Inode
// holds, and why).
//
// The table holds one entry per inode the kernel caches -- millions for a large tree
// -- so it is an open-addressing array of InodePtr (16 bytes a slot, at most 70% full,
// linear probing, deletion by backward shift: no tombstones), about half the memory of
// a node-based map.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "sync/mutex.h"
#include "txnfuse/txn/inode.h"

namespace txnfs {

class InodeTable {
 public:
  // The inode for `nodeid` if the kernel knows it, else null.
  InodePtr get(uint64_t nodeid) EXCLUDES(mu_);
  // Adds one lookup to the entry for inode->nodeid, inserting `inode` if there is
  // none. Returns the entry in the table (which may be an earlier one of the same
  // object). An entry of another generation is an earlier object whose inode number
  // XFS gave to `inode`'s: `inode` replaces it and takes over its lookups, because the
  // kernel forgets the earlier object's lookups under the same nodeid (when it drops
  // the inode it marked stale on seeing the new generation).
  InodePtr add_lookup(InodePtr inode) EXCLUDES(mu_);
  // Adds one lookup to an entry known to be present (the root, or a held inode).
  void add_lookup_existing(const InodePtr &inode) EXCLUDES(mu_);
  // Drops n lookups; the entry leaves the table when none remain, and is returned then
  // (else null).
  InodePtr forget(uint64_t nodeid, uint64_t n) EXCLUDES(mu_);
  size_t size() EXCLUDES(mu_);

 private:
  // The slot holding `nodeid`, or the empty slot where it would go.
  size_t find_locked(uint64_t nodeid) const REQUIRES(mu_);
  size_t home(uint64_t nodeid) const REQUIRES(mu_);
  void grow_locked() REQUIRES(mu_);
  // Empties slot i; moves later entries of its probe run back so lookups still find them.
  InodePtr erase_locked(size_t i) REQUIRES(mu_);

  Mutex mu_{LockRank::kInodeTable};              // a leaf (src/sync/lock_order.h)
  std::vector<InodePtr> slots_ GUARDED_BY(mu_);  // size a power of two (or 0)
  size_t used_ GUARDED_BY(mu_) = 0;
  unsigned bits_ GUARDED_BY(mu_) = 0;  // slots_.size() == 1 << bits_
};

}  // namespace txnfs
