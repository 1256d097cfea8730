#include "txnfuse/fuse/views.h"

#include <sys/ioctl.h>

#include <spdlog/spdlog.h>

namespace txnfs {

namespace {
thread_local uint32_t current_slot = 0;
// FUSE_DEV_IOC_BACKING_CLOSE (linux/fuse.h since 6.9; Debian 12's headers are older).
constexpr unsigned long kBackingClose = _IOW(229, 2, uint32_t);
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

uint32_t Views::end(uint64_t txn_id, std::vector<uint64_t> *revoke) {
  MutexLock g(mu_);
  auto it = by_txn_.find(txn_id);
  if (it == by_txn_.end()) return 0;
  uint32_t s = it->second;
  by_txn_.erase(it);
  slots_[s].txn.reset();
  slots_[s].txn_id = 0;  // free once the kernel forgot its nodeids (attach)
  for (auto &[nodeid, b] : backing_)
    if (slot_of(nodeid) == s && b.opens && !b.revoking) {
      b.revoking = true;
      if (revoke) revoke->push_back(nodeid);
    }
  return s;
}

int Views::passthrough_open(fuse_req_t req, uint32_t slot, uint64_t object, uint32_t generation,
                            int fd, bool want) {
  if (slot == 0 || slot >= kDirSlot) return 0;
  MutexLock g(mu_);
  uint64_t n = nodeid(slot, object);
  if (auto it = backing_.find(n); it != backing_.end()) {  // (even if turned off since)
    it->second.opens++;
    opened_++;
    return it->second.id;
  }
  if (!want || !passthrough_on() || !slots_[slot].txn) return 0;
  // (An ioctl on /dev/fuse that waits for nothing: fine under this leaf.)
  int id = fuse_passthrough_open(req, fd);
  if (id <= 0) {  // (libfuse logged why: e.g. no CAP_SYS_ADMIN)
    passthrough_on_ = false;
    spdlog::warn("passthrough refused by the kernel: transactions' new files go through the daemon");
    return 0;
  }
  backing_[n] = Backing{id, 1, generation, false};
  opened_++;
  return id;
}

void Views::passthrough_release(fuse_req_t req, uint32_t slot, uint64_t object) {
  MutexLock g(mu_);
  auto it = backing_.find(nodeid(slot, object));
  if (it == backing_.end() || --it->second.opens) return;
  fuse_passthrough_close(req, it->second.id);
  backing_.erase(it);
}

bool Views::revoking(uint64_t n, uint32_t *generation) {
  MutexLock g(mu_);
  auto it = backing_.find(n);
  if (it == backing_.end() || !it->second.revoking) return false;
  *generation = it->second.generation;
  return true;
}

void Views::revoked(uint64_t n) {
  MutexLock g(mu_);
  if (auto it = backing_.find(n); it != backing_.end()) it->second.revoking = false;
  revoked_++;
}

Views::Counts Views::passthrough_counts() {
  MutexLock g(mu_);
  Counts c{0, opened_, revoked_};
  for (auto &[n, b] : backing_) c.open += b.opens;
  return c;
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
  if (s.lookups || s.txn) return;
  // The kernel holds no inode of the ended view: a backing id left (a release the
  // kernel never sent) belongs to no open and must not meet the slot's next view.
  for (auto it = backing_.begin(); it != backing_.end();)
    if (slot_of(it->first) == slot) {
      if (dev_fd_ >= 0) ::ioctl(dev_fd_, kBackingClose, &it->second.id);
      it = backing_.erase(it);
    } else {
      ++it;
    }
}

size_t Views::open() {
  MutexLock g(mu_);
  return by_txn_.size();
}

size_t Views::held() {
  MutexLock g(mu_);
  size_t n = 0;
  for (const Slot &slot : slots_) n += !slot.txn_id && slot.lookups;
  return n;
}

void Views::plain_change_begins(uint64_t object) {
  MutexLock g(mu_);
  plain_changing_[object]++;
}

void Views::plain_change_done(uint64_t object) {
  MutexLock g(mu_);
  if (auto it = plain_changing_.find(object); it != plain_changing_.end() && --it->second == 0)
    plain_changing_.erase(it);
}

bool Views::plain_changing(uint64_t object) {
  MutexLock g(mu_);
  return plain_changing_.count(object) != 0;
}

std::vector<uint32_t> Views::live_slots() {
  MutexLock g(mu_);
  std::vector<uint32_t> out;
  out.reserve(by_txn_.size());
  for (auto &[id, s] : by_txn_) out.push_back(s);
  return out;
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
