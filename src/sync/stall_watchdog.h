// The stall watchdog — a FUSE request left unanswered for long is a bug (a deadlock, a lost
// wake-up, a wait without a timeout), and this makes it visible.
//
// Every request handler runs inside an InFlight scope (ops.cc wraps the whole operation
// table): the thread's slot records the opcode, the nodeid and a deadline. That costs a
// coarse clock read and a few relaxed stores per request. A thread of its own checks the
// slots every 0.5 s; a request past its deadline — TXNFS_STALL_SECONDS (default 30) after
// it started — is logged as an error, "stalled request: OPCODE nodeid N ... unanswered
// for S s", and, when TXNFS_STALL_DUMP=DIR is set, every thread's stack is saved to
// DIR/stall-PID-N.txt with `gdb -batch -p PID -ex 'thread apply all bt'` (the test suite
// sets it and fails any test after which such a file exists).
//
// Waits that may legitimately last long move the deadline: a request about to wait up
// to T for a lock (or a commit waiting for its transaction's requests) calls
// expect_wait(T), so a lock timeout longer than the threshold is not a stall.
//
// Test hook: TXNFS_DEBUG_BLOCK_LOOKUP=NAME:SECONDS makes every LOOKUP of NAME sleep that
// long before it is served, once it counts as a request in flight (test_daemon_locks.py,
// test_parked_requests.py).
#pragma once
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "sync/mutex.h"

namespace txnfs::stall {

// One request thread's in-flight request. Written by that thread, read by the watchdog.
struct Slot {
  std::atomic<int64_t> start_ns{0};     // 0: no request in flight
  std::atomic<int64_t> deadline_ns{0};  // stalled once the clock passes it
  std::atomic<const char *> op{nullptr};
  std::atomic<uint64_t> nodeid{0};
  std::atomic<bool> in_use{false};  // owned by a live thread
  pid_t tid = 0;
  int64_t reported = 0;  // watchdog only: start_ns already reported
};

// Monotonic (coarse) clock in ns.
int64_t now_ns();

// Marks the calling thread's request in flight for its lifetime (outermost scope only).
class InFlight {
 public:
  InFlight(const char *op, uint64_t nodeid);
  ~InFlight();
  InFlight(const InFlight &) = delete;
  InFlight &operator=(const InFlight &) = delete;

 private:
  Slot *slot_;
};

// The calling thread's request may now wait up to `wait` without being a stall.
void expect_wait(std::chrono::milliseconds wait);

// The debug hook for LOOKUP (see above); free when the variable is unset.
void lookup_hook(const char *name);

// The checking thread. One per daemon: run_mount starts it before serving requests.
class Watchdog {
 public:
  // Reads TXNFS_STALL_SECONDS / TXNFS_STALL_DUMP and starts the checking thread.
  void start();
  void stop();
  ~Watchdog() { stop(); }

 private:
  void loop();
  std::thread thread_;
  std::string dump_dir_;
  int dumps_ = 0;  // written so far
};

// Nanoseconds a request may run before it counts as stalled (TXNFS_STALL_SECONDS).
int64_t threshold_ns();

}  // namespace txnfs::stall
