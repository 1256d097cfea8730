// TxnBinding (txn_binding.h): which open transaction a request from a thread belongs
// to, and the reaper's watch on the owners of open transactions.
#include "txnfuse/txn/txn_binding.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

#include <spdlog/spdlog.h>

#include "txnfuse/txn/proc.h"

namespace txnfs {

void TxnBinding::open_watch() {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (wake_fd_ < 0 || epoll_fd_ < 0)
    throw std::system_error(errno, std::generic_category(), "the owner reaper's epoll set");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0)
    throw std::system_error(errno, std::generic_category(), "the owner reaper's epoll set");
}

void TxnBinding::wake() {
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
  }
}

void TxnBinding::close_watch() {
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  epoll_fd_ = -1;
}

std::vector<uint64_t> TxnBinding::exited(int timeout_ms) {
  std::vector<uint64_t> ids;
  epoll_event evs[64];
  int n = ::epoll_wait(epoll_fd_, evs, 64, timeout_ms);
  for (int k = 0; k < n; k++) {
    uint64_t id = evs[k].data.u64;
    if (id == 0) {  // wake_fd_: stopping
      uint64_t v;
      [[maybe_unused]] auto r = ::read(wake_fd_, &v, sizeof v);
      continue;
    }
    ids.push_back(id);
  }
  return ids;
}

TxnPtr TxnBinding::find(uint64_t id) {
  MutexLock g(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

int TxnBinding::bind(const TxnPtr &t) {
  bool process = t->process_bound();
  pid_t owner = t->pid;
  {
    MutexLock g(mu_);
    if ((process ? by_process_.count(owner) : by_thread_.count(owner)) != 0) return EBUSY;
    // The reaper watches the owner from now on (unbind stops it, also under mu_).
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = t->id();
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, t->pidfd, &ev) != 0) {
      int err = errno;
      spdlog::error("begin: watching owner {}: {}", owner, std::strerror(err));
      return err;
    }
    by_id_[t->id()] = t;
    (process ? by_process_ : by_thread_)[owner] = t;
    if (process) {
      ++epoch_;
      proc_cache_.clear();
    }
  }
  // (seq_cst: op_opendir marks a directory, then asks any_open(); see commit_here)
  open_count_.fetch_add(1, std::memory_order_seq_cst);
  return 0;
}

// Its owner no longer binds `t`, and the reaper stops watching it (detach, unbind).
void TxnBinding::leave_owner(Txn &t) {
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, t.pidfd, nullptr);
  auto &m = t.process_bound() ? by_process_ : by_thread_;
  if (auto it = m.find(t.pid); it != m.end() && it->second.get() == &t) m.erase(it);
  if (t.process_bound()) {
    ++epoch_;
    proc_cache_.clear();
  }
}

int TxnBinding::detach(Txn &t, const std::string &gid) {
  MutexLock g(mu_);
  if (!by_gid_.emplace(gid, by_id_.at(t.id())).second) return EEXIST;
  leave_owner(t);
  return 0;
}

TxnPtr TxnBinding::find_prepared(const std::string &gid) {
  MutexLock g(mu_);
  auto it = by_gid_.find(gid);
  return it == by_gid_.end() ? nullptr : it->second;
}

void TxnBinding::unbind(Txn &t) {
  {
    MutexLock g(mu_);
    by_id_.erase(t.id());
    if (!t.gid.empty())
      if (auto it = by_gid_.find(t.gid); it != by_gid_.end() && it->second.get() == &t)
        by_gid_.erase(it);
    leave_owner(t);
  }
  open_count_.fetch_sub(1, std::memory_order_acq_rel);
}

TxnPtr TxnBinding::bound(pid_t tid) {
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
// holding the mutex, then caches the answer for this epoch.
TxnPtr TxnBinding::lookup_process(pid_t tid) {
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
