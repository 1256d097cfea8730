// Mutexes the thread-safety analysis understands, and the run-time lock-order checker.
//
//   Mutex mu_{LockRank::kCommittedView};  // rank: its place in lock_order.h
//   int n_ GUARDED_BY(mu_);
//   void f() EXCLUDES(mu_) { MutexLock g(mu_); n_++; }
//   void wait() { MutexLock g(mu_); while (!ready_) cv_.wait(mu_); }
//
// libstdc++'s std::mutex, lock_guard and condition_variable carry no annotations, so
// the analysis cannot see through them: use these instead for every mutex of the
// daemon. CondVar waits on a Mutex (it releases and re-takes the underlying
// std::mutex); write waits as `while (!cond) cv.wait(mu)` — a predicate lambda would
// be analysed as a function of its own that holds nothing.
//
// Lock-order checker (built with -Dlock_order_check, the default for debug builds):
// each thread keeps a stack of the mutexes it holds; acquiring one whose rank is not
// strictly greater than the rank of the last one acquired is a violation (re-locking a
// RecursiveMutex the thread already holds is not). A violation is reported — both
// mutexes' names and the stack — through the reporter (stderr unless the program sets
// one), before the thread blocks; with TXNFS_LOCK_ORDER_ABORT=1 in the environment the
// process then aborts (the integration tests set it). Without the option the checks
// compile to nothing.
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

#include "sync/lock_order.h"
#include "sync/thread_annotations.h"

namespace txnfs {

namespace lock_order {
#ifdef TXNFS_LOCK_ORDER_CHECK
inline constexpr bool kEnabled = true;
void acquire(const void *mu, LockRank rank, bool recursive);
void release(const void *mu);
void assert_held(const void *mu, LockRank rank);
// Reports (as a violation) any mutex the calling thread holds; `what` says what it is
// about to wait for.
void assert_none_held(const char *what);
#else
inline constexpr bool kEnabled = false;
inline void acquire(const void *, LockRank, bool) {}
inline void release(const void *) {}
inline void assert_held(const void *, LockRank) {}
inline void assert_none_held(const char *) {}
#endif
// Where violations go (default: stderr). The daemon logs them.
using Reporter = void (*)(const std::string &message);
void set_reporter(Reporter r);
// Violations reported so far (for tests).
unsigned long violations();
}  // namespace lock_order

class CAPABILITY("mutex") Mutex {
 public:
  explicit Mutex(LockRank rank) : rank_(rank) {}
  Mutex(const Mutex &) = delete;
  Mutex &operator=(const Mutex &) = delete;

  void lock() ACQUIRE() {
    lock_order::acquire(this, rank_, false);
    mu_.lock();
  }
  void unlock() RELEASE() {
    mu_.unlock();
    lock_order::release(this);
  }
  // Tells the analysis (and, with the checker, verifies) that the caller holds it.
  void assert_held() const ASSERT_CAPABILITY(this) { lock_order::assert_held(this, rank_); }
  LockRank rank() const { return rank_; }
  // For CondVar only.
  std::mutex &native() { return mu_; }

 private:
  std::mutex mu_;
  const LockRank rank_;
};

// A thread may lock it again while it holds it (MetaDb's nested transactions).
class CAPABILITY("mutex") RecursiveMutex {
 public:
  explicit RecursiveMutex(LockRank rank) : rank_(rank) {}
  RecursiveMutex(const RecursiveMutex &) = delete;
  RecursiveMutex &operator=(const RecursiveMutex &) = delete;

  void lock() ACQUIRE() {
    lock_order::acquire(this, rank_, true);
    mu_.lock();
  }
  void unlock() RELEASE() {
    mu_.unlock();
    lock_order::release(this);
  }
  void assert_held() const ASSERT_CAPABILITY(this) { lock_order::assert_held(this, rank_); }
  LockRank rank() const { return rank_; }

 private:
  std::recursive_mutex mu_;
  const LockRank rank_;
};

// Holds `mu` for its scope; unlock()/lock() release and re-take it inside the scope.
template <typename M>
class SCOPED_CAPABILITY BasicMutexLock {
 public:
  explicit BasicMutexLock(M &mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~BasicMutexLock() RELEASE() {
    if (held_) mu_.unlock();
  }
  void unlock() RELEASE() {
    mu_.unlock();
    held_ = false;
  }
  void lock() ACQUIRE() {
    mu_.lock();
    held_ = true;
  }
  BasicMutexLock(const BasicMutexLock &) = delete;
  BasicMutexLock &operator=(const BasicMutexLock &) = delete;

 private:
  M &mu_;
  bool held_ = true;
};

using MutexLock = BasicMutexLock<Mutex>;
using RecursiveMutexLock = BasicMutexLock<RecursiveMutex>;

// A condition variable whose waits take the Mutex they release. During a wait the
// mutex stays on the thread's lock-order stack: the thread acquires nothing else
// until the wait has re-taken it.
class CondVar {
 public:
  void wait(Mutex &mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lk(mu.native(), std::adopt_lock);
    cv_.wait(lk);
    lk.release();
  }
  // False when `deadline` passed (the mutex is held again either way).
  template <typename Clock, typename Duration>
  bool wait_until(Mutex &mu, const std::chrono::time_point<Clock, Duration> &deadline)
      REQUIRES(mu) {
    std::unique_lock<std::mutex> lk(mu.native(), std::adopt_lock);
    bool woken = cv_.wait_until(lk, deadline) == std::cv_status::no_timeout;
    lk.release();
    return woken;
  }
  template <typename Rep, typename Period>
  bool wait_for(Mutex &mu, const std::chrono::duration<Rep, Period> &d) REQUIRES(mu) {
    return wait_until(mu, std::chrono::steady_clock::now() + d);
  }
  void notify_one() { cv_.notify_one(); }
  void notify_all() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace txnfs
