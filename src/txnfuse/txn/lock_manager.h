// LockManager — isolation between transactions and plain requests.
//
// Lockable things: an object (inode, by nodeid) and a directory entry (directory
// nodeid + name). Modes are the multi-granularity ones: a request that changes the
// entry "d/x" takes IX on d and X on (d, "x"); listing d takes S on d, which
// conflicts with the IX of any writer of d's entries, and nothing else.
//
// Every owner (an open transaction, or one plain request) holds its locks until it
// calls release_all. A request that must wait records what it waits for; when
// waiting would close a cycle in the waits-for graph, the requester fails with
// EDEADLK instead (no timeout is needed to find a deadlock). Every wait is also
// bounded by a timeout (ETIMEDOUT). The manager's mutex is a leaf of the lock
// hierarchy (src/sync/lock_order.h), never held across I/O; a request waits for a lock
// holding no mutex at all.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "sync/mutex.h"

namespace txnfs {

enum class LockMode : uint8_t { IS = 0, IX = 1, S = 2, X = 3 };

struct LockKey {
  uint64_t node = 0;
  std::string name;  // empty: the object itself; else the entry `name` in dir `node`
  bool operator==(const LockKey &o) const { return node == o.node && name == o.name; }
  static LockKey object(uint64_t n) { return {n, {}}; }
  static LockKey entry(uint64_t dir, const char *name) { return {dir, name}; }
};

struct LockKeyHash {
  size_t operator()(const LockKey &k) const {
    return std::hash<uint64_t>()(k.node) * 31 + std::hash<std::string>()(k.name);
  }
};

class LockManager;

// Whoever holds locks. Owned by the caller; must release_all before destruction.
class LockOwner {
 public:
  explicit LockOwner(uint64_t id) : id_(id) {}
  uint64_t id() const { return id_; }

 private:
  friend class LockManager;
  uint64_t id_;
  // Guarded by the manager's mutex (which the analysis cannot name from here).
  std::unordered_map<LockKey, LockMode, LockKeyHash> held_;
  const LockKey *waiting_ = nullptr;
  LockMode waiting_mode_ = LockMode::IS;
  CondVar cv_;  // waits on the manager's mutex
};

class LockManager {
 public:
  // Grants `mode` on `key` to `owner` (upgrading what it holds), waiting up to
  // `timeout` while other owners hold conflicting modes. Returns 0, EDEADLK (waiting
  // would deadlock, or may_wait is false and there is a conflict) or ETIMEDOUT.
  int acquire(LockOwner &owner, const LockKey &key, LockMode mode,
              std::chrono::milliseconds timeout, bool may_wait = true) EXCLUDES(mu_);
  void release_all(LockOwner &owner) EXCLUDES(mu_);

  // Grants every (key, mode) of `set` to `owner` at once, or none of them: waits up to
  // `timeout` until the whole set is grantable together, holding none of it meanwhile.
  // Such a waiter is in no queue, so no one ever waits for it: it cannot close a cycle
  // (with other set waiters or with single-lock requesters), and it yields to the
  // requests queued on its keys. Returns 0 or ETIMEDOUT (nothing granted). Duplicate
  // keys are merged (lock_sup). Used for the lock set of an NFS COMPOUND, declared
  // before its first operation runs (docs/isolation.md, "Predeclared lock sets").
  int acquire_set(LockOwner &owner, const std::vector<std::pair<LockKey, LockMode>> &set,
                  std::chrono::milliseconds timeout) EXCLUDES(mu_);

  // Owners other than `owner` holding a mode on `key` that conflicts with `mode`.
  std::vector<uint64_t> conflicting(const LockOwner &owner, const LockKey &key, LockMode mode)
      EXCLUDES(mu_);

  // Does anyone hold a mode on `key` that conflicts with `mode`?
  bool contended(const LockKey &key, LockMode mode) EXCLUDES(mu_);
  // (locks held, locks awaited) by `owner`.
  std::pair<size_t, size_t> counts(const LockOwner &owner) EXCLUDES(mu_);

  uint64_t deadlocks() const { return deadlocks_; }
  uint64_t timeouts() const { return timeouts_; }
  uint64_t sets() const { return sets_; }
  uint64_t set_waits() const { return set_waits_; }
  uint64_t set_timeouts() const { return set_timeouts_; }

 private:
  struct Entry {
    std::vector<std::pair<LockOwner *, LockMode>> holders;
    std::vector<LockOwner *> waiters;
  };
  std::vector<LockOwner *> blockers(const Entry &e, const LockOwner &owner, LockMode mode) const
      REQUIRES(mu_);
  bool grantable(const Entry &e, const LockOwner &owner, LockMode mode) const REQUIRES(mu_);
  bool closes_cycle(const LockOwner &start, const LockKey &key, LockMode mode) REQUIRES(mu_);
  void wake_set_waiters() REQUIRES(mu_);

  Mutex mu_{LockRank::kLockManager};
  std::unordered_map<LockKey, Entry, LockKeyHash> table_ GUARDED_BY(mu_);
  std::vector<LockOwner *> set_waiters_ GUARDED_BY(mu_);  // in acquire_set, woken by every release
  std::atomic<uint64_t> deadlocks_{0}, timeouts_{0}, sets_{0}, set_waits_{0}, set_timeouts_{0};
};

// The weakest mode that covers both.
LockMode lock_sup(LockMode a, LockMode b);
bool lock_compatible(LockMode a, LockMode b);

}  // namespace txnfs
