#include "txnfuse/txn/lock_manager.h"

#include <algorithm>
#include <cerrno>
#include <string>
#include <unordered_set>

#include <spdlog/spdlog.h>

namespace txnfs {

bool lock_compatible(LockMode a, LockMode b) {
  //            IS     IX     S      X
  static const bool m[4][4] = {{true, true, true, false},     // IS
                               {true, true, false, false},    // IX
                               {true, false, true, false},    // S
                               {false, false, false, false}}; // X
  return m[int(a)][int(b)];
}

LockMode lock_sup(LockMode a, LockMode b) {
  if (a == b) return a;
  if (a == LockMode::X || b == LockMode::X) return LockMode::X;
  // IS+IX = IX, IS+S = S, IX+S = SIX, which we round up to X.
  if ((a == LockMode::IX && b == LockMode::S) || (a == LockMode::S && b == LockMode::IX))
    return LockMode::X;
  return std::max(a, b);
}

// Owners `owner` must wait for before it may hold `mode` on `e`: holders of a
// conflicting mode, and — unless it already holds the lock (an upgrade, which
// must not queue behind requests that wait for it) — conflicting requests queued
// before it. Queueing in arrival order keeps a stream of compatible requests from
// starving a conflicting one.
std::vector<LockOwner *> LockManager::blockers(const Entry &e, const LockOwner &owner,
                                               LockMode mode) const {
  std::vector<LockOwner *> out;
  bool holder = false;
  for (auto &[o, m] : e.holders) {
    if (o == &owner) holder = true;
    else if (!lock_compatible(m, mode)) out.push_back(o);
  }
  if (!holder)
    for (LockOwner *w : e.waiters) {
      if (w == &owner) break;
      if (!lock_compatible(w->waiting_mode_, mode)) out.push_back(w);
    }
  return out;
}

bool LockManager::grantable(const Entry &e, const LockOwner &owner, LockMode mode) const {
  return blockers(e, owner, mode).empty();
}

std::vector<uint64_t> LockManager::conflicting(const LockOwner &owner, const LockKey &key,
                                               LockMode mode) {
  MutexLock g(mu_);
  std::vector<uint64_t> out;
  auto it = table_.find(key);
  if (it == table_.end()) return out;
  for (auto &[o, m] : it->second.holders)
    if (o != &owner && !lock_compatible(m, mode)) out.push_back(o->id());
  return out;
}

// Would `start` waiting for `key` in `mode` close a cycle in the waits-for graph?
// An owner waits for every blocker of the request it is waiting on.
bool LockManager::closes_cycle(const LockOwner &start, const LockKey &key, LockMode mode) {
  std::vector<const LockOwner *> stack;
  std::unordered_set<const LockOwner *> seen;
  auto push_blockers = [&](const LockKey &k, const LockOwner &who, LockMode m) REQUIRES(mu_) {
    auto it = table_.find(k);
    if (it == table_.end()) return false;
    for (LockOwner *b : blockers(it->second, who, m)) {
      if (b == &start) return true;
      if (seen.insert(b).second) stack.push_back(b);
    }
    return false;
  };
  push_blockers(key, start, mode);
  while (!stack.empty()) {
    const LockOwner *o = stack.back();
    stack.pop_back();
    if (o->waiting_ && push_blockers(*o->waiting_, *o, o->waiting_mode_)) return true;
  }
  return false;
}

int LockManager::acquire(LockOwner &owner, const LockKey &key, LockMode mode,
                         std::chrono::milliseconds timeout, bool may_wait) {
  // A wait of up to `timeout` under another mutex would stall whoever needs that one.
  lock_order::assert_none_held("a lock of the lock manager");
  MutexLock g(mu_);
  auto held = owner.held_.find(key);
  LockMode want = held == owner.held_.end() ? mode : lock_sup(held->second, mode);
  if (held != owner.held_.end() && held->second == want) return 0;
  Entry &e = table_[key];
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool waited = false;
  while (!grantable(e, owner, want)) {
    if (!may_wait) return EDEADLK;
    if (!waited) {
      if (closes_cycle(owner, key, want)) {
        ++deadlocks_;
        return EDEADLK;
      }
      e.waiters.push_back(&owner);
      owner.waiting_ = &table_.find(key)->first;
      owner.waiting_mode_ = want;
      waited = true;
    }
    if (!owner.cv_.wait_until(mu_, deadline) && !grantable(e, owner, want)) {
      owner.waiting_ = nullptr;
      std::erase(e.waiters, &owner);
      for (LockOwner *w : e.waiters) w->cv_.notify_one();  // one fewer ahead of them
      wake_set_waiters();
      ++timeouts_;
      std::string who;
      for (LockOwner *b : blockers(e, owner, want)) who += " " + std::to_string(b->id());
      spdlog::warn("lock wait timed out: owner {} wanted mode {} on {}{}{}; blocked by{}",
                   owner.id(), int(want), key.node, key.name.empty() ? "" : "/", key.name, who);
      if (e.holders.empty() && e.waiters.empty()) table_.erase(key);
      return ETIMEDOUT;
    }
  }
  if (waited) {
    owner.waiting_ = nullptr;
    std::erase(e.waiters, &owner);
  }
  auto h = std::find_if(e.holders.begin(), e.holders.end(),
                        [&](auto &p) { return p.first == &owner; });
  if (h == e.holders.end()) e.holders.push_back({&owner, want});
  else h->second = want;
  owner.held_[key] = want;
  return 0;
}

bool LockManager::contended(const LockKey &key, LockMode mode) {
  MutexLock g(mu_);
  auto it = table_.find(key);
  if (it == table_.end()) return false;
  for (auto &[o, m] : it->second.holders)
    if (!lock_compatible(m, mode)) return true;
  return false;
}

std::pair<size_t, size_t> LockManager::counts(const LockOwner &owner) {
  MutexLock g(mu_);
  return {owner.held_.size(), owner.waiting_ ? 1 : 0};
}

void LockManager::release_all(LockOwner &owner) {
  MutexLock g(mu_);
  for (auto &[key, mode] : owner.held_) {
    auto it = table_.find(key);
    if (it == table_.end()) continue;
    Entry &e = it->second;
    std::erase_if(e.holders, [&](auto &p) { return p.first == &owner; });
    for (LockOwner *w : e.waiters) w->cv_.notify_one();
    if (e.holders.empty() && e.waiters.empty()) table_.erase(it);
  }
  if (!owner.held_.empty()) wake_set_waiters();
  owner.held_.clear();
}

void LockManager::wake_set_waiters() {
  for (LockOwner *w : set_waiters_) w->cv_.notify_one();
}

int LockManager::acquire_set(LockOwner &owner,
                             const std::vector<std::pair<LockKey, LockMode>> &set,
                             std::chrono::milliseconds timeout) {
  lock_order::assert_none_held("a lock set of the lock manager");
  std::unordered_map<LockKey, LockMode, LockKeyHash> want;
  for (auto &[k, m] : set) {
    auto [it, fresh] = want.emplace(k, m);
    if (!fresh) it->second = lock_sup(it->second, m);
  }
  ++sets_;
  MutexLock g(mu_);
  for (auto &[k, m] : want) {
    auto held = owner.held_.find(k);
    if (held != owner.held_.end()) m = lock_sup(held->second, m);
  }
  // Grantable as a whole? Holders and queued requesters of a conflicting mode block it
  // (blockers()); keys no one holds or awaits always are.
  auto all_grantable = [&]() REQUIRES(mu_) {
    for (auto &[k, m] : want) {
      auto it = table_.find(k);
      if (it != table_.end() && !grantable(it->second, owner, m)) return false;
    }
    return true;
  };
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool waited = false;
  while (!all_grantable()) {
    if (!waited) {
      set_waiters_.push_back(&owner);
      waited = true;
      ++set_waits_;
    }
    if (!owner.cv_.wait_until(mu_, deadline) && !all_grantable()) {
      std::erase(set_waiters_, &owner);
      ++set_timeouts_;
      spdlog::warn("lock set wait timed out: owner {} wanted {} locks for {} ms", owner.id(),
                   want.size(), timeout.count());
      return ETIMEDOUT;
    }
  }
  if (waited) std::erase(set_waiters_, &owner);
  for (auto &[k, m] : want) {
    Entry &e = table_[k];
    auto h = std::find_if(e.holders.begin(), e.holders.end(),
                          [&](auto &p) { return p.first == &owner; });
    if (h == e.holders.end()) e.holders.push_back({&owner, m});
    else h->second = m;
    owner.held_[k] = m;
  }
  return 0;
}

}  // namespace txnfs
