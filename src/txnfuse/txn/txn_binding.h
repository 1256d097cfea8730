// TxnBinding: the open transactions, by id and by the thread or process they belong to,
// and the reaper's watch on their owners.
//
// A transaction belongs to one thread, or to a process and all processes it starts
// (TXNFS_BIND_PROCESS). Every FUSE request carries the caller's thread id; bound() maps
// it to the open transaction it belongs to, or to none (a plain request). A
// thread-bound transaction is found by the thread id; a process-bound one by walking
// the thread's ancestry in /proc, cached per epoch.
//
// Invariants (all under mu_, rank 10 in src/sync/lock_order.h: the first mutex a
// request may take; nothing of the transaction core is held while it is taken):
//   - a transaction is in by_id_ from bind() to unbind(), and in by_thread_ (by its
//     thread) or by_process_ (by its process) but not both, from bind() to detach() or
//     unbind(); a prepared one (detached) is in by_gid_ instead; an owner binds one
//     transaction;
//   - its owner's pidfd is in the reaper's epoll set (data: the transaction's id) while
//     it is bound to the owner, so beginning and ending a transaction wake no thread;
//   - a proc_cache_ entry is an answer only while its epoch is epoch_, which bumps
//     whenever the set of process-bound transactions changes: a cached answer is never
//     stale;
//   - open_count_ counts bound transactions (raised after bind(), lowered after unbind()
//     leave mu_): while it is 0, bound() answers without taking mu_.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sync/mutex.h"
#include "txnfuse/txn/transaction.h"

namespace txnfs {

class TxnBinding {
 public:
  TxnBinding() = default;
  TxnBinding(const TxnBinding &) = delete;
  TxnBinding &operator=(const TxnBinding &) = delete;

  // Opens the reaper's epoll set and the eventfd that wakes it (std::system_error).
  void open_watch();
  // Wakes a reaper waiting in exited(), for good (stopping).
  void wake();
  // After the reaper stopped.
  void close_watch();
  // Waits up to `timeout_ms` for owners to exit: the ids of their transactions (none
  // when woken or timed out).
  std::vector<uint64_t> exited(int timeout_ms);

  bool any_open() const { return open_count_.load(std::memory_order_acquire) > 0; }
  // The open transaction a request from thread `tid` belongs to, or null. Cheap when no
  // transaction is open.
  TxnPtr bound(pid_t tid) EXCLUDES(mu_);
  TxnPtr find(uint64_t id) EXCLUDES(mu_);
  // Binds `t` to its owner (t->pid, a thread or, process_bound(), a process) and watches
  // the owner (t->pidfd). EBUSY: the owner has a transaction; else 0 or the errno of
  // the watch.
  int bind(const TxnPtr &t) EXCLUDES(mu_);
  void unbind(Txn &t) EXCLUDES(mu_);
  // A prepared transaction (TxnManager::prepare) leaves its owner: no request belongs to
  // it any more and the reaper stops watching the owner, but it stays open (find(),
  // for_each(), any_open()) and can be found by its global id until unbind(). EEXIST:
  // another prepared transaction has that id.
  int detach(Txn &t, const std::string &gid) EXCLUDES(mu_);
  TxnPtr find_prepared(const std::string &gid) EXCLUDES(mu_);
  // Calls fn(const TxnPtr &) for every bound transaction, under mu_ (fn takes no
  // mutex of the transaction core).
  template <class F>
  void for_each(F fn) EXCLUDES(mu_) {
    MutexLock g(mu_);
    for (auto &[id, t] : by_id_) fn(t);
  }

 private:
  friend class TxnManager;  // (for its annotations: EXCLUDES(binding_.mu_))
  TxnPtr lookup_process(pid_t tid) EXCLUDES(mu_);
  void leave_owner(Txn &t) REQUIRES(mu_);

  Mutex mu_{LockRank::kTxnBinding};  // guards the maps
  std::unordered_map<uint64_t, TxnPtr> by_id_ GUARDED_BY(mu_);
  std::unordered_map<pid_t, TxnPtr> by_thread_ GUARDED_BY(mu_);   // thread-bound
  std::unordered_map<pid_t, TxnPtr> by_process_ GUARDED_BY(mu_);  // process-bound, by pid
  std::unordered_map<std::string, TxnPtr> by_gid_ GUARDED_BY(mu_);  // prepared, by global id
  // tid -> (epoch, txn)
  std::unordered_map<pid_t, std::pair<uint64_t, TxnPtr>> proc_cache_ GUARDED_BY(mu_);
  uint64_t epoch_ GUARDED_BY(mu_) = 0;  // bumps when the set of process-bound transactions changes
  std::atomic<int> open_count_{0};

  // The reaper's epoll set: wake_fd_ (data 0, stopping) and every bound transaction's
  // pidfd (data: its id), added and removed under mu_ with the binding.
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: stopping
};

}  // namespace txnfs
