// The inodes the kernel currently knows, keyed by FUSE nodeid. An entry leaves the
// table when the kernel forgets its last lookup (see txn/inode.h for what an Inode
// holds, and why).
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

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
  // Drops n lookups; the entry leaves the table when none remain.
  void forget(uint64_t nodeid, uint64_t n) EXCLUDES(mu_);
  size_t size() EXCLUDES(mu_);

 private:
  Mutex mu_{LockRank::kInodeTable};  // a leaf (src/sync/lock_order.h)
  std::unordered_map<uint64_t, InodePtr> map_ GUARDED_BY(mu_);
};

}  // namespace txnfs
