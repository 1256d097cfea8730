#include "sync/mutex.h"

#include <execinfo.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace txnfs {

const char *lock_rank_name(LockRank r) {
  switch (r) {
    case LockRank::kTxnBinding:
      return "TxnBinding::mu_";
    case LockRank::kTxn:
      return "Txn::mu";
    case LockRank::kMetaDb:
      return "MetaDb::mu_";
    case LockRank::kGroupCommit:
      return "GroupCommit::gc_mu_";
    case LockRank::kCleaner:
      return "TxnManager::clean_mu_";
    case LockRank::kLockManager:
      return "LockManager::mu_";
    case LockRank::kInodeTable:
      return "InodeTable::mu_";
    case LockRank::kViews:
      return "Views::mu_";
    case LockRank::kFdCache:
      return "FdCache::mu_";
    case LockRank::kCommittedView:
      return "CommittedView::mu_";
    case LockRank::kListings:
      return "ListingSnapshots::mu_";
    case LockRank::kStepMirror:
      return "StepMirror::mu_";
    case LockRank::kLazyStash:
      return "GroupCommit::lazy_mu_";
    case LockRank::kWriters:
      return "TxnManager::writers_mu_";
    case LockRank::kPool:
      return "park::Pool::mu_";
    case LockRank::kTxnIds:
      return "MetaDb::ids_mu_";
    case LockRank::kInvalidator:
      return "Invalidator::mu_";
    case LockRank::kResolver:
      return "Resolver::mu_";
    case LockRank::kStallWatchdog:
      return "stall::Registry::mu";
  }
  return "?";
}

namespace lock_order {

namespace {

void to_stderr(const std::string &m) {
  std::string line = "txnfs: " + m + "\n";
  [[maybe_unused]] auto n = ::write(2, line.data(), line.size());
}

std::atomic<Reporter> reporter{to_stderr};
std::atomic<unsigned long> count{0};

}  // namespace

void set_reporter(Reporter r) { reporter = r ? r : to_stderr; }
unsigned long violations() { return count; }

#ifdef TXNFS_LOCK_ORDER_CHECK

namespace {

struct Held {
  const void *mu;
  LockRank rank;
};

// The mutexes this thread holds, in acquisition order. Deeper nesting than this is
// not checked (nothing in the daemon nests more than three).
constexpr int kMaxHeld = 16;
struct Stack {
  Held held[kMaxHeld];
  int n = 0;     // entries in held
  int lost = 0;  // acquisitions beyond kMaxHeld, not tracked
};
thread_local Stack stack;

bool abort_on_violation() {
  static const bool on = [] {
    const char *v = std::getenv("TXNFS_LOCK_ORDER_ABORT");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

std::string held_list() {
  std::string s;
  for (int k = 0; k < stack.n; k++) {
    if (k) s += ", ";
    s += lock_rank_name(stack.held[k].rank);
  }
  return s.empty() ? "nothing" : s;
}

[[gnu::noinline]] void violation(const std::string &what) {
  count++;
  std::string m = "lock order violation: " + what + " (thread holds: " + held_list() +
                  "; hierarchy: src/sync/lock_order.h)\n  at:";
  void *frames[32];
  int n = ::backtrace(frames, 32);
  if (char **syms = ::backtrace_symbols(frames, n)) {
    for (int k = 1; k < n; k++) m += std::string("\n    ") + syms[k];
    std::free(syms);
  }
  reporter.load()(m);
  if (abort_on_violation()) std::abort();
}

}  // namespace

void acquire(const void *mu, LockRank rank, bool recursive) {
  Stack &s = stack;
  if (s.n > 0) {
    const Held &top = s.held[s.n - 1];
    bool again = false;
    if (recursive)
      for (int k = 0; k < s.n; k++) again |= s.held[k].mu == mu;
    if (!again && uint8_t(rank) <= uint8_t(top.rank))
      violation(std::string("acquiring ") + lock_rank_name(rank) + " (rank " +
                std::to_string(int(rank)) + ") while holding " + lock_rank_name(top.rank) +
                " (rank " + std::to_string(int(top.rank)) + ")");
  }
  if (s.n == kMaxHeld) {
    s.lost++;
    return;
  }
  s.held[s.n++] = {mu, rank};
}

void release(const void *mu) {
  Stack &s = stack;
  for (int k = s.n - 1; k >= 0; k--)
    if (s.held[k].mu == mu) {
      for (int j = k; j + 1 < s.n; j++) s.held[j] = s.held[j + 1];
      s.n--;
      return;
    }
  if (s.lost > 0) s.lost--;
}

void assert_held(const void *mu, LockRank rank) {
  Stack &s = stack;
  for (int k = 0; k < s.n; k++)
    if (s.held[k].mu == mu) return;
  if (s.lost == 0)
    violation(std::string(lock_rank_name(rank)) + " is not held where the code requires it");
}

void assert_none_held(const char *what) {
  if (stack.n > 0) violation(std::string("waiting for ") + what + " while holding a mutex");
}

#endif  // TXNFS_LOCK_ORDER_CHECK

}  // namespace lock_order
}  // namespace txnfs
