#include "txnfuse/txn/lock_manager.h"

#include <algorithm>
#include <cerrno>
#include <future>
#include <optional>
#include <memory>
#include <string>
#include <unordered_set>

#include <spdlog/spdlog.h>

namespace txnfs {

bool lock_compatible(LockMode a, LockMode b) {
  //            IS     IX     S      X
  static const bool m[4][4] = {{true, true, true, false},      // IS
                               {true, true, false, false},     // IX
                               {true, false, true, false},     // S
                               {false, false, false, false}};  // X
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
// before it (`self`: its own place in the queue; null: not queued, so all of them).
// Queueing in arrival order keeps a stream of compatible requests from starving a
// conflicting one. An owner never waits for itself.
std::vector<LockOwner *> LockManager::blockers(const Entry &e, const LockOwner &owner,
                                               LockMode mode, const LockWaiter *self) const {
  std::vector<LockOwner *> out;
  bool holder = false;
  for (auto &[o, m] : e.holders) {
    if (o == &owner) holder = true;
    else if (!lock_compatible(m, mode)) out.push_back(o);
  }
  if (!holder)
    for (LockWaiter *w : e.waiters) {
      if (w == self) break;
      if (w->owner != &owner && !lock_compatible(w->mode, mode)) out.push_back(w->owner);
    }
  return out;
}

bool LockManager::grantable(const Entry &e, const LockOwner &owner, LockMode mode,
                            const LockWaiter *self) const {
  return blockers(e, owner, mode, self).empty();
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
// An owner waits for every blocker of each request it has queued. (Set waiters are in
// no queue: no one waits for them.)
bool LockManager::closes_cycle(const LockOwner &start, const LockKey &key, LockMode mode) {
  std::vector<const LockOwner *> stack;
  std::unordered_set<const LockOwner *> seen;
  auto push_blockers = [&](const LockKey &k, const LockOwner &who, LockMode m,
                           const LockWaiter *self) REQUIRES(mu_) {
    auto it = table_.find(k);
    if (it == table_.end()) return false;
    for (LockOwner *b : blockers(it->second, who, m, self)) {
      if (b == &start) return true;
      if (seen.insert(b).second) stack.push_back(b);
    }
    return false;
  };
  push_blockers(key, start, mode, nullptr);
  while (!stack.empty()) {
    const LockOwner *o = stack.back();
    stack.pop_back();
    for (const LockWaiter *w : o->waits_)
      if (w->key && push_blockers(*w->key, *o, w->mode, w)) return true;
  }
  return false;
}

void LockManager::grant(LockOwner &owner, const LockKey &key, LockMode mode) {
  Entry &e = table_[key];
  auto h =
      std::find_if(e.holders.begin(), e.holders.end(), [&](auto &p) { return p.first == &owner; });
  if (h == e.holders.end()) e.holders.push_back({&owner, mode});
  else h->second = mode;
  owner.held_[key] = mode;
}

LockWaiter *LockManager::park(LockOwner &owner, std::chrono::milliseconds timeout,
                              LockResume resume) {
  waiters_.emplace_back();
  LockWaiter *w = &waiters_.back();
  w->owner = &owner;
  w->timeout = timeout;
  w->deadline = std::chrono::steady_clock::now() + timeout;
  w->resume = std::move(resume);
  owner.waits_.push_back(w);
  bool earliest = deadlines_.empty() || w->deadline < deadlines_.begin()->first;
  deadlines_.insert({w->deadline, w});
  ++parked_total_;
  if (!timer_.joinable()) timer_ = std::thread([this] { timer_loop(); });
  else if (earliest) timer_cv_.notify_one();
  return w;
}

LockResume LockManager::unpark(LockWaiter *w, Ready &ready) {
  LockResume resume = std::move(w->resume);
  deadlines_.erase({w->deadline, w});
  std::erase(w->owner->waits_, w);
  std::optional<LockKey> key;
  if (w->key) {
    key = *w->key;
    auto it = table_.find(*key);
    std::erase(it->second.waiters, w);
    if (it->second.holders.empty() && it->second.waiters.empty()) table_.erase(it);
  } else {
    std::erase(set_waiters_, w);
  }
  waiters_.remove_if([w](const LockWaiter &x) { return &x == w; });
  // One fewer ahead of the waiters behind it.
  if (key) settle(*key, ready);
  else settle_sets(ready);
  return resume;
}

bool LockManager::set_grantable(const LockWaiter &w) const {
  for (auto &[k, m] : w.set) {
    auto it = table_.find(k);
    if (it != table_.end() && !grantable(it->second, *w.owner, m)) return false;
  }
  return true;
}

void LockManager::settle(const LockKey &key, Ready &ready) {
  auto it = table_.find(key);
  if (it != table_.end()) {
    Entry &e = it->second;
    for (size_t k = 0; k < e.waiters.size();) {
      LockWaiter *w = e.waiters[k];
      if (!grantable(e, *w->owner, w->mode, w)) {
        ++k;
        continue;
      }
      LockOwner &o = *w->owner;
      LockMode m = w->mode;
      e.waiters.erase(e.waiters.begin() + k);  // (the waiters before k stay ahead)
      deadlines_.erase({w->deadline, w});
      std::erase(o.waits_, w);
      ready.push_back({std::move(w->resume), 0});
      waiters_.remove_if([w](const LockWaiter &x) { return &x == w; });
      grant(o, key, m);
    }
  }
  settle_sets(ready);
}

void LockManager::settle_sets(Ready &ready) {
  for (size_t k = 0; k < set_waiters_.size();) {
    LockWaiter *w = set_waiters_[k];
    if (!set_grantable(*w)) {
      ++k;
      continue;
    }
    set_waiters_.erase(set_waiters_.begin() + k);
    deadlines_.erase({w->deadline, w});
    std::erase(w->owner->waits_, w);
    for (auto &[key, m] : w->set) grant(*w->owner, key, m);
    ready.push_back({std::move(w->resume), 0});
    waiters_.remove_if([w](const LockWaiter &x) { return &x == w; });
  }
}

void LockManager::run(Ready &ready) {
  lock_order::assert_none_held("continuations of the lock manager");
  for (auto &[resume, err] : ready) resume(err);
}

int LockManager::try_acquire(LockOwner &owner, const LockKey &key, LockMode mode) {
  MutexLock g(mu_);
  auto held = owner.held_.find(key);
  LockMode want = held == owner.held_.end() ? mode : lock_sup(held->second, mode);
  if (held != owner.held_.end() && held->second == want) return 0;
  auto it = table_.find(key);
  if (it != table_.end() && !grantable(it->second, owner, want)) return EWOULDBLOCK;
  grant(owner, key, want);
  return 0;
}

int LockManager::acquire_async(LockOwner &owner, const LockKey &key, LockMode mode,
                               std::chrono::milliseconds timeout, LockResume resume) {
  MutexLock g(mu_);
  auto held = owner.held_.find(key);
  LockMode want = held == owner.held_.end() ? mode : lock_sup(held->second, mode);
  if (held != owner.held_.end() && held->second == want) return 0;
  Entry &e = table_[key];
  if (grantable(e, owner, want)) {
    grant(owner, key, want);
    return 0;
  }
  auto drop_if_unused = [&]() REQUIRES(mu_) {
    if (e.holders.empty() && e.waiters.empty()) table_.erase(key);
  };
  if (closes_cycle(owner, key, want)) {
    ++deadlocks_;
    drop_if_unused();
    return EDEADLK;
  }
  if (timeout.count() <= 0) {
    ++timeouts_;
    drop_if_unused();
    return ETIMEDOUT;
  }
  LockWaiter *w = park(owner, timeout, std::move(resume));
  w->key = &table_.find(key)->first;
  w->mode = want;
  e.waiters.push_back(w);
  return kParked;
}

int LockManager::acquire(LockOwner &owner, const LockKey &key, LockMode mode,
                         std::chrono::milliseconds timeout, bool may_wait) {
  // A wait of up to `timeout` under another mutex would stall whoever needs that one.
  lock_order::assert_none_held("a lock of the lock manager");
  if (!may_wait) return try_acquire(owner, key, mode) ? EDEADLK : 0;
  auto done = std::make_shared<std::promise<int>>();
  int err = acquire_async(owner, key, mode, timeout, [done](int e) { done->set_value(e); });
  return err == kParked ? done->get_future().get() : err;
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
  return {owner.held_.size(), owner.waits_.size()};
}

size_t LockManager::parked() {
  MutexLock g(mu_);
  return waiters_.size();
}

void LockManager::release_all(LockOwner &owner) {
  Ready ready;
  {
    MutexLock g(mu_);
    std::vector<LockKey> freed;
    for (auto &[key, mode] : owner.held_) {
      auto it = table_.find(key);
      if (it == table_.end()) continue;
      Entry &e = it->second;
      std::erase_if(e.holders, [&](auto &p) { return p.first == &owner; });
      if (e.holders.empty() && e.waiters.empty()) table_.erase(it);
      else freed.push_back(key);
    }
    owner.held_.clear();
    for (auto &k : freed) settle(k, ready);
    settle_sets(ready);
  }
  run(ready);
}

size_t LockManager::cancel(LockOwner &owner, int err) {
  Ready ready;
  size_t n = 0;
  {
    MutexLock g(mu_);
    while (!owner.waits_.empty()) {
      LockResume r = unpark(owner.waits_.front(), ready);
      ready.push_back({std::move(r), err});
      ++n;
    }
  }
  for (auto &[resume, e] : ready) resume(e);
  return n;
}

size_t LockManager::cancel_all(int err) {
  Ready ready;
  size_t n = 0;
  {
    MutexLock g(mu_);
    while (!waiters_.empty()) {
      LockResume r = unpark(&waiters_.front(), ready);
      ready.push_back({std::move(r), err});
      ++n;
    }
  }
  run(ready);
  return n;
}

void LockManager::timer_loop() {
  MutexLock g(mu_);
  while (!stop_) {
    if (deadlines_.empty()) {
      timer_cv_.wait(mu_);
      continue;
    }
    auto first = deadlines_.begin()->first;
    if (std::chrono::steady_clock::now() < first) {
      timer_cv_.wait_until(mu_, first);
      continue;
    }
    Ready ready;
    auto now = std::chrono::steady_clock::now();
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      LockWaiter *w = deadlines_.begin()->second;
      uint64_t id = w->owner->id();
      if (w->key) {
        ++timeouts_;
        std::string who;
        auto it = table_.find(*w->key);
        for (LockOwner *b : blockers(it->second, *w->owner, w->mode, w))
          who += " " + std::to_string(b->id());
        spdlog::warn("lock wait timed out: owner {} wanted mode {} on {}{}{}; blocked by{}", id,
                     int(w->mode), w->key->node, w->key->name.empty() ? "" : "/", w->key->name,
                     who);
      } else {
        ++set_timeouts_;
        spdlog::warn("lock set wait timed out: owner {} wanted {} locks for {} ms", id,
                     w->set.size(), w->timeout.count());
      }
      LockResume r = unpark(w, ready);
      ready.push_back({std::move(r), ETIMEDOUT});
    }
    g.unlock();
    run(ready);
    g.lock();
  }
}

LockManager::~LockManager() {
  {
    MutexLock g(mu_);
    stop_ = true;
    timer_cv_.notify_one();
  }
  if (timer_.joinable()) timer_.join();
}

int LockManager::acquire_set_async(LockOwner &owner,
                                   const std::vector<std::pair<LockKey, LockMode>> &set,
                                   std::chrono::milliseconds timeout, LockResume resume) {
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
  LockWaiter probe;
  probe.owner = &owner;
  probe.set = std::move(want);
  if (set_grantable(probe)) {
    for (auto &[k, m] : probe.set) grant(owner, k, m);
    return 0;
  }
  ++set_waits_;
  if (timeout.count() <= 0) {
    ++set_timeouts_;
    return ETIMEDOUT;
  }
  LockWaiter *w = park(owner, timeout, std::move(resume));
  w->set = std::move(probe.set);
  set_waiters_.push_back(w);
  return kParked;
}

int LockManager::acquire_set(LockOwner &owner, const std::vector<std::pair<LockKey, LockMode>> &set,
                             std::chrono::milliseconds timeout) {
  lock_order::assert_none_held("a lock set of the lock manager");
  auto done = std::make_shared<std::promise<int>>();
  int err = acquire_set_async(owner, set, timeout, [done](int e) { done->set_value(e); });
  return err == kParked ? done->get_future().get() : err;
}

}  // namespace txnfs
