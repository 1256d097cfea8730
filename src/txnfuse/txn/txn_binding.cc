// Binding: which open transaction a request from a thread belongs to (TxnManager::bound).
// A thread-bound transaction is found by the thread id; a process-bound one by walking
// the thread's ancestry in /proc, cached per epoch (the epoch bumps whenever the set of
// process-bound transactions changes, so a cached answer is never stale).
#include <vector>

#include "txnfuse/txn/proc.h"
#include "txnfuse/txn/txn.h"

namespace txnfs {

TxnPtr TxnManager::bound(pid_t tid) {
  if (!any_open() || tid <= 0) return nullptr;
  {
    MutexLock g(mu_);
    if (auto it = by_thread_.find(tid); it != by_thread_.end()) return it->second;
    if (by_process_.empty()) return nullptr;
    if (auto it = proc_cache_.find(tid); it != proc_cache_.end() && it->second.first == epoch_)
      return it->second.second;
  }
  return lookup_process(tid);
}

// Is `tid` in a bound process or one of its descendants? Reads /proc without
// holding the manager's mutex, then caches the answer for this epoch.
TxnPtr TxnManager::lookup_process(pid_t tid) {
  std::vector<pid_t> chain;
  auto [tgid, ppid] = tgid_ppid(tid);
  if (tgid) chain.push_back(tgid);
  for (int depth = 0; ppid > 1 && depth < 64; depth++) {
    chain.push_back(ppid);
    ppid = tgid_ppid(ppid).second;
  }
  MutexLock g(mu_);
  TxnPtr t;
  for (pid_t p : chain)
    if (auto it = by_process_.find(p); it != by_process_.end()) {
      t = it->second;
      break;
    }
  if (proc_cache_.size() > 100000) proc_cache_.clear();
  proc_cache_[tid] = {epoch_, t};
  return t;
}

}  // namespace txnfs
