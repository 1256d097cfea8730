#include "txnfuse/fuse/views.h"

namespace txnfs {

namespace {
thread_local uint32_t current_slot = 0;
}  // namespace

Views::Views() {
  MutexLock g(mu_);
  slots_.resize(kSlots);
}

uint32_t Views::attach(const TxnPtr &t) {
  MutexLock g(mu_);
  if (auto it = by_txn_.find(t->id()); it != by_txn_.end()) return it->second;
  // Slots 1 .. kDirSlot-1, round robin from the last one given: a slot just freed is
  // given last, so an ended view's nodeids stay ESTALE as long as possible.
  for (uint32_t n = 0; n < kDirSlot - 1; n++) {
    uint32_t s = 1 + (next_ - 1 + n) % (kDirSlot - 1);
    Slot &slot = slots_[s];
    if (slot.txn_id || slot.lookups) continue;
    slot.txn = t;
    slot.txn_id = t->id();
    by_txn_[t->id()] = s;
    next_ = s % (kDirSlot - 1) + 1;
    t->view_base = nodeid(s, 0);
    return s;
  }
  return 0;
}

TxnPtr Views::txn(uint32_t slot) {
  MutexLock g(mu_);
  return slot < kDirSlot ? slots_[slot].txn : nullptr;
}

uint32_t Views::end(uint64_t txn_id) {
  MutexLock g(mu_);
  auto it = by_txn_.find(txn_id);
  if (it == by_txn_.end()) return 0;
  uint32_t s = it->second;
  by_txn_.erase(it);
  slots_[s].txn.reset();
  slots_[s].txn_id = 0;  // free once the kernel forgot its nodeids (attach)
  return s;
}

void Views::looked_up(uint32_t slot) {
  if (slot == 0 || slot >= kDirSlot) return;
  MutexLock g(mu_);
  slots_[slot].lookups++;
}

void Views::forgot(uint32_t slot, uint64_t n) {
  if (slot == 0 || slot >= kDirSlot) return;
  MutexLock g(mu_);
  Slot &s = slots_[slot];
  s.lookups = s.lookups > n ? s.lookups - n : 0;
}

size_t Views::open() {
  MutexLock g(mu_);
  return by_txn_.size();
}

uint32_t Views::current() { return current_slot; }

Views::Scope::Scope(uint32_t slot) : prev_(current_slot) { current_slot = slot; }
Views::Scope::~Scope() { current_slot = prev_; }

void Views::to_kernel(fuse_entry_param &e) {
  if (e.ino == 0) return;  // a negative entry names no inode
  // The kernel makes the plain root's generation 0 (fuse_lookup_name); a view's root
  // must match it, or a plain handle of the root given the view's slot is stale.
  if (e.ino == FUSE_ROOT_ID) e.generation = 0;
  uint32_t s = current();
  e.ino = nodeid(s, e.ino);
  looked_up(s);
}

}  // namespace txnfs
