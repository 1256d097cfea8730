// LockManager — isolation between transactions and plain requests.
//
// Lockable things: an object (inode, by nodeid) and a directory entry (directory
// nodeid + name). Modes are the multi-granularity ones: a request that changes the
// entry "d/x" takes IX on d and X on (d, "x"); listing d takes S on d, which
// conflicts with the IX of any writer of d's entries, and nothing else.
//
// Every owner (an open transaction, or one plain request) holds its locks until it
// calls release_all. A request that must wait is queued as a waiter; when waiting
// would close a cycle in the waits-for graph, the requester fails with EDEADLK
// instead (no timeout is needed to find a deadlock). Every wait is also bounded by a
// timeout (ETIMEDOUT).
//
// Waiting occupies no thread: acquire_async() either answers at once or parks the
// request, keeping its continuation. Whoever makes the lock grantable (release_all, a
// waiter ahead leaving the queue) grants it in the table and then calls the
// continuation with 0; the manager's timer thread calls it with ETIMEDOUT when the
// deadline passes; cancel() with the error it is given. Continuations run exactly once,
// after the manager's mutex is released, on the thread that settled the wait; they must
// not block (the daemon hands the request on to its resume executor, fuse/park.h).
// acquire() and acquire_set() wait on top of that for callers that may block.
//
// The manager's mutex is a leaf of the lock hierarchy (src/sync/lock_order.h), never
// held across I/O or a continuation.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
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
struct LockWaiter;

// Whoever holds locks. Owned by the caller; must release_all before destruction, and
// must not be destroyed while one of its waits is parked.
class LockOwner {
 public:
  explicit LockOwner(uint64_t id) : id_(id) {}
  uint64_t id() const { return id_; }

 private:
  friend class LockManager;
  uint64_t id_;
  // Guarded by the manager's mutex (which the analysis cannot name from here).
  std::unordered_map<LockKey, LockMode, LockKeyHash> held_;
  // Its parked waits: several requests of one transaction may wait at once.
  std::vector<LockWaiter *> waits_;
};

// The outcome of a parked wait: 0 (granted), ETIMEDOUT, or the errno cancel() gave.
using LockResume = std::function<void(int err)>;

// One parked wait: a single lock (queued on its key) or a whole set (in no queue).
struct LockWaiter {
  LockOwner *owner = nullptr;
  const LockKey *key = nullptr;  // the table's key; null for a set
  LockMode mode = LockMode::IS;
  std::unordered_map<LockKey, LockMode, LockKeyHash> set;  // a set's locks
  std::chrono::steady_clock::time_point deadline;
  std::chrono::milliseconds timeout{0};
  LockResume resume;
};

class LockManager {
 public:
  // acquire_async() and acquire_set_async() parked the request: its continuation runs
  // later. (Not an errno: negative.)
  static constexpr int kParked = -1;

  LockManager() = default;
  ~LockManager();  // stops the timer; every wait must have been settled (cancel_all)
  LockManager(const LockManager &) = delete;
  LockManager &operator=(const LockManager &) = delete;

  // Grants `mode` on `key` to `owner` (upgrading what it holds) and returns 0, or
  // returns EDEADLK when waiting would close a cycle, or ETIMEDOUT when `timeout` is not
  // positive; else queues the owner and returns kParked: `resume` is called once the
  // wait is settled (with the lock held when it gets 0). Queued in arrival order.
  int acquire_async(LockOwner &owner, const LockKey &key, LockMode mode,
                    std::chrono::milliseconds timeout, LockResume resume) EXCLUDES(mu_);
  // 0 when `mode` on `key` is granted now, else EWOULDBLOCK (nothing queued).
  int try_acquire(LockOwner &owner, const LockKey &key, LockMode mode) EXCLUDES(mu_);
  // The waiting form: blocks the calling thread (which must hold no mutex) until the
  // wait is settled. Returns 0, EDEADLK (waiting would deadlock, or may_wait is false
  // and there is a conflict) or ETIMEDOUT.
  int acquire(LockOwner &owner, const LockKey &key, LockMode mode,
              std::chrono::milliseconds timeout, bool may_wait = true) EXCLUDES(mu_);
  // Releases every lock of `owner` and grants what waits for them (its own parked waits
  // stay; cancel() them first if the owner goes away).
  void release_all(LockOwner &owner) EXCLUDES(mu_);
  // Settles every parked wait of `owner` with `err` (its continuations run on this
  // thread). Returns how many there were.
  size_t cancel(LockOwner &owner, int err) EXCLUDES(mu_);
  // Settles every parked wait with `err` (unmount).
  size_t cancel_all(int err) EXCLUDES(mu_);

  // Grants every (key, mode) of `set` to `owner` at once, or none of them: waits up to
  // `timeout` until the whole set is grantable together, holding none of it meanwhile.
  // Such a waiter is in no queue, so no one ever waits for it: it cannot close a cycle
  // (with other set waiters or with single-lock requesters), and it yields to the
  // requests queued on its keys. Returns 0 or ETIMEDOUT (nothing granted). Duplicate
  // keys are merged (lock_sup). Used for the lock set of an NFS COMPOUND, declared
  // before its first operation runs (docs/isolation.md, "Predeclared lock sets").
  int acquire_set(LockOwner &owner, const std::vector<std::pair<LockKey, LockMode>> &set,
                  std::chrono::milliseconds timeout) EXCLUDES(mu_);
  // The same, parking: 0 (granted now), ETIMEDOUT (not grantable and `timeout` is not
  // positive) or kParked (`resume` gets 0 with the set held, or ETIMEDOUT, or cancel()'s
  // error).
  int acquire_set_async(LockOwner &owner, const std::vector<std::pair<LockKey, LockMode>> &set,
                        std::chrono::milliseconds timeout, LockResume resume) EXCLUDES(mu_);

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
  // Waits parked now, and ever.
  size_t parked() EXCLUDES(mu_);
  uint64_t parked_total() const { return parked_total_; }

 private:
  struct Entry {
    std::vector<std::pair<LockOwner *, LockMode>> holders;
    std::vector<LockWaiter *> waiters;  // arrival order
  };
  using Ready = std::vector<std::pair<LockResume, int>>;  // continuations to run, unlocked
  std::vector<LockOwner *> blockers(const Entry &e, const LockOwner &owner, LockMode mode,
                                    const LockWaiter *self) const REQUIRES(mu_);
  bool grantable(const Entry &e, const LockOwner &owner, LockMode mode,
                 const LockWaiter *self = nullptr) const REQUIRES(mu_);
  bool set_grantable(const LockWaiter &w) const REQUIRES(mu_);
  bool closes_cycle(const LockOwner &start, const LockKey &key, LockMode mode) REQUIRES(mu_);
  void grant(LockOwner &owner, const LockKey &key, LockMode mode) REQUIRES(mu_);
  LockWaiter *park(LockOwner &owner, std::chrono::milliseconds timeout, LockResume resume)
      REQUIRES(mu_);
  // Takes `w` out of its queue and the deadline index and frees it; returns its
  // continuation. Grants whatever that makes grantable (into `ready`).
  LockResume unpark(LockWaiter *w, Ready &ready) REQUIRES(mu_);
  // Grants the waiters of `key` (in queue order) and then the set waiters that have
  // become grantable.
  void settle(const LockKey &key, Ready &ready) REQUIRES(mu_);
  void settle_sets(Ready &ready) REQUIRES(mu_);
  static void run(Ready &ready);
  void timer_loop() EXCLUDES(mu_);

  Mutex mu_{LockRank::kLockManager};
  std::unordered_map<LockKey, Entry, LockKeyHash> table_ GUARDED_BY(mu_);
  std::list<LockWaiter> waiters_ GUARDED_BY(mu_);          // every parked wait
  std::vector<LockWaiter *> set_waiters_ GUARDED_BY(mu_);  // sets, arrival order
  std::set<std::pair<std::chrono::steady_clock::time_point, LockWaiter *>> deadlines_
      GUARDED_BY(mu_);
  CondVar timer_cv_;  // the earliest deadline changed, or stop
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread timer_;  // started with the first parked wait (after any fork)
  std::atomic<uint64_t> deadlocks_{0}, timeouts_{0}, sets_{0}, set_waits_{0}, set_timeouts_{0},
      parked_total_{0};
};

// The weakest mode that covers both.
LockMode lock_sup(LockMode a, LockMode b);
bool lock_compatible(LockMode a, LockMode b);

}  // namespace txnfs
