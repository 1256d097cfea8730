#include "txnfuse/fuse/listings.h"

#include <algorithm>
#include <random>
#include <unordered_set>

namespace txnfs {

namespace {

size_t bytes_of(const Listing &l) {
  size_t n = sizeof(Listing) + l.entries.capacity() * sizeof(ListedEntry);
  for (auto &e : l.entries) n += e.name.capacity();
  return n;
}

bool same_entries(const Listing &a, const Listing &b) {
  if (a.by_cookie != b.by_cookie || a.ctime_ns != b.ctime_ns ||
      a.entries.size() != b.entries.size())
    return false;
  for (size_t k = 0; k < a.entries.size(); k++) {
    const ListedEntry &x = a.entries[k], &y = b.entries[k];
    if (x.name != y.name || x.ino != y.ino || x.type != y.type || x.cookie != y.cookie)
      return false;
  }
  return true;
}

}  // namespace

size_t Listing::position(uint64_t off) const {
  if (!dir_offset::is_snapshot(off) || dir_offset::id_of(off) != id ||
      dir_offset::by_position(off) == by_cookie)
    return npos;
  uint32_t low = dir_offset::low(off);
  if (!by_cookie) return low >= 1 && low <= entries.size() ? low : npos;
  // XFS hands out its cookies in increasing order; the linear search is for a
  // listing that was not (none seen).
  auto less = [](const ListedEntry &e, uint32_t c) { return e.cookie < c; };
  auto it = std::lower_bound(entries.begin(), entries.end(), low, less);
  if (it == entries.end() || it->cookie != low)
    it = std::find_if(entries.begin(), entries.end(), [&](auto &e) { return e.cookie == low; });
  return it == entries.end() ? npos : size_t(it - entries.begin()) + 1;
}

Listing Listing::rebased(size_t k, const std::vector<ListedEntry> &now, uint64_t v) const {
  Listing out;
  out.dir = dir;
  out.view = v;
  out.by_cookie = false;
  out.ctime_ns = ctime_ns;
  out.entries.assign(entries.begin(), entries.begin() + std::min(k, entries.size()));
  std::unordered_set<std::string> given;
  for (auto &e : out.entries) given.insert(e.name);
  for (auto &e : now)
    if (!given.count(e.name)) out.entries.push_back(e);
  for (auto &e : out.entries) e.cookie = 0;
  return out;
}

ListingSnapshots::ListingSnapshots(size_t max_count, size_t max_bytes)
    : max_count_(std::max<size_t>(max_count, 1)), max_bytes_(max_bytes) {
  std::random_device rd;
  next_id_ = (uint32_t(rd()) & dir_offset::kIdMask) | 1;
}

std::shared_ptr<const Listing> ListingSnapshots::add(Listing l) {
  MutexLock g(mu_);
  auto key = std::make_pair(l.dir, l.view);
  if (auto it = latest_.find(key); it != latest_.end()) {
    auto b = by_id_.find(it->second);
    if (b != by_id_.end() && same_entries(**b->second, l)) {
      lru_.splice(lru_.begin(), lru_, b->second);
      return *b->second;
    }
  }
  // Ids wrap after 2^30 - 1 of them; one still kept is skipped.
  do {
    l.id = next_id_;
    next_id_ = (next_id_ + 1) & dir_offset::kIdMask;
    if (!next_id_) next_id_ = 1;
  } while (by_id_.count(l.id));
  l.bytes = bytes_of(l);
  auto p = std::make_shared<const Listing>(std::move(l));
  lru_.push_front(p);
  by_id_[p->id] = lru_.begin();
  latest_[key] = p->id;
  bytes_ += p->bytes;
  evict();
  return p;
}

void ListingSnapshots::evict() {
  // The newest stays, however large: its reader holds it anyway.
  while (lru_.size() > 1 && (lru_.size() > max_count_ || bytes_ > max_bytes_)) {
    const Listing &old = *lru_.back();
    auto key = std::make_pair(old.dir, old.view);
    if (auto it = latest_.find(key); it != latest_.end() && it->second == old.id) latest_.erase(it);
    by_id_.erase(old.id);
    bytes_ -= old.bytes;
    lru_.pop_back();
  }
}

std::shared_ptr<const Listing> ListingSnapshots::find(uint32_t id, uint64_t dir) {
  MutexLock g(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end() || (*it->second)->dir != dir) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return *it->second;
}

size_t ListingSnapshots::count() {
  MutexLock g(mu_);
  return lru_.size();
}

size_t ListingSnapshots::bytes() {
  MutexLock g(mu_);
  return bytes_;
}

}  // namespace txnfs
