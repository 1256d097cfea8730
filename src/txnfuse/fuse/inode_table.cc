#include "txnfuse/fuse/inode_table.h"

#include <unistd.h>

#include <utility>

namespace txnfs {

InodePtr InodeTable::get(uint64_t nodeid) {
  MutexLock g(mu_);
  auto it = map_.find(nodeid);
  return it == map_.end() ? nullptr : it->second;
}

InodePtr InodeTable::add_lookup(InodePtr inode) {
  InodePtr earlier;  // released outside the lock
  MutexLock g(mu_);
  auto [it, inserted] = map_.try_emplace(inode->nodeid, inode);
  if (!inserted && it->second->generation != inode->generation) {
    inode->nlookup = it->second->nlookup;
    earlier = std::exchange(it->second, std::move(inode));
  }
  it->second->nlookup++;
  return it->second;
}

void InodeTable::add_lookup_existing(const InodePtr &inode) {
  MutexLock g(mu_);
  inode->nlookup++;
}

void InodeTable::forget(uint64_t nodeid, uint64_t n) {
  InodePtr victim;  // closed outside the lock
  MutexLock g(mu_);
  auto it = map_.find(nodeid);
  if (it == map_.end()) return;
  Inode &i = *it->second;
  i.nlookup = n >= i.nlookup ? 0 : i.nlookup - n;
  if (i.nlookup == 0 && nodeid != 1) {
    victim = std::move(it->second);
    map_.erase(it);
  }
}

size_t InodeTable::size() {
  MutexLock g(mu_);
  return map_.size();
}

}  // namespace txnfs
