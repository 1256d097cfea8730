#include "txnfuse/fuse/inode_table.h"

#include <utility>

namespace txnfs {

size_t InodeTable::home(uint64_t nodeid) const {
  // Fibonacci hashing: inode numbers cluster, the top bits of the product do not.
  return size_t((nodeid * 0x9E3779B97F4A7C15ull) >> (64 - bits_));
}

size_t InodeTable::find_locked(uint64_t nodeid) const {
  size_t mask = slots_.size() - 1;
  size_t i = home(nodeid);
  while (slots_[i] && slots_[i]->nodeid != nodeid) i = (i + 1) & mask;
  return i;
}

void InodeTable::grow_locked() {
  std::vector<InodePtr> old = std::exchange(slots_, {});
  bits_ = old.empty() ? 6 : bits_ + 1;
  slots_.resize(size_t(1) << bits_);
  for (auto &p : old)
    if (p) slots_[find_locked(p->nodeid)] = std::move(p);
}

InodePtr InodeTable::erase_locked(size_t i) {
  InodePtr gone = std::move(slots_[i]);
  used_--;
  size_t mask = slots_.size() - 1;
  for (size_t j = i;;) {
    j = (j + 1) & mask;
    if (!slots_[j]) break;
    size_t k = home(slots_[j]->nodeid);
    // Entry j may stay if its home lies cyclically in (i, j]: moving it to i would
    // put it before its home.
    bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (stays) continue;
    slots_[i] = std::move(slots_[j]);
    i = j;
  }
  return gone;
}

InodePtr InodeTable::get(uint64_t nodeid) {
  MutexLock g(mu_);
  if (slots_.empty()) return nullptr;
  return slots_[find_locked(nodeid)];
}

InodePtr InodeTable::add_lookup(InodePtr inode) {
  InodePtr earlier;  // released outside the lock
  MutexLock g(mu_);
  if ((used_ + 1) * 10 > slots_.size() * 7) grow_locked();
  InodePtr &slot = slots_[find_locked(inode->nodeid)];
  if (!slot) {
    slot = std::move(inode);
    used_++;
  } else if (slot->generation != inode->generation) {
    inode->nlookup = slot->nlookup;
    earlier = std::exchange(slot, std::move(inode));
  }
  slot->nlookup++;
  return slot;
}

void InodeTable::add_lookup_existing(const InodePtr &inode) {
  MutexLock g(mu_);
  inode->nlookup++;
}

InodePtr InodeTable::forget(uint64_t nodeid, uint64_t n) {
  MutexLock g(mu_);
  if (slots_.empty()) return nullptr;
  size_t i = find_locked(nodeid);
  if (!slots_[i]) return nullptr;
  Inode &in = *slots_[i];
  in.nlookup = n >= in.nlookup ? 0 : in.nlookup - n;
  if (in.nlookup == 0 && nodeid != 1) return erase_locked(i);  // (released by the caller)
  return nullptr;
}

size_t InodeTable::size() {
  MutexLock g(mu_);
  return used_;
}

}  // namespace txnfs
