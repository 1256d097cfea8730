// Parked requests: no request handler waits for a lock of the LockManager.
//
// A handler takes its locks first and acts after (two-phase locking: nothing changes
// before its last lock). When a lock must wait, Op::lock parks the request instead:
// it captures how to run the same handler again (the request and its arguments; see
// Site), queues that continuation with the lock manager and unwinds the handler with
// park::Unwind, which the handler wrapper (ops.cc) catches. The thread is free at once.
// When the lock is granted the continuation runs the handler again from the start on
// the resume pool's threads; locks the request already holds are granted again at once.
// When the wait fails (ETIMEDOUT, or its transaction ends, or unmount) the request is
// answered with that error. Deadlocks are found before parking (EDEADLK at once).
//
// Invariants:
//   - a parked request's arguments stay valid: what libfuse keeps on its stack
//     (fuse_file_info, struct stat, fuse_bufvec) is copied, and the request buffer the
//     names and data point into is kept — over io_uring libfuse keeps it until the
//     reply; on /dev/fuse the loop thread gives its buffer up (take_loop_buffer) and
//     reads the next request into a fresh one;
//   - a parked request keeps its Op's state (Op::State): a transaction's request stays
//     counted in flight, a plain request keeps the locks it holds;
//   - continuations never run under a mutex of the daemon, and the pools' jobs run
//     holding none.
#pragma once
#include <functional>
#include <memory>
#include <thread>
#include <deque>
#include <vector>

#include "sync/mutex.h"

namespace txnfs::park {

// Thrown by Op::lock once the request is parked. Deliberately not a std::exception:
// handlers' catch (const std::exception &) blocks let it pass.
struct Unwind {};

// The request the handler on this thread serves, as its wrapper sees it.
class Site {
 public:
  virtual ~Site() = default;
  // A closure that runs the same handler again with the same request and arguments
  // (copying what would not outlive this call).
  virtual std::function<void()> capture() = 0;
};

// The site of the handler running on this thread (null outside a wrapped handler).
Site *current();
class Scope {
 public:
  explicit Scope(Site *s);
  ~Scope();
  Scope(const Scope &) = delete;
  Scope &operator=(const Scope &) = delete;

 private:
  Site *prev_;
};

// The /dev/fuse loop's receive buffer of this thread (malloc'd by libfuse's
// fuse_session_receive_buf). A parked request takes it over; the loop then reads into a
// fresh one.
struct LoopBuffer {
  void *mem = nullptr;
  bool taken = false;
};
void set_loop_buffer(LoopBuffer *b);
// The current thread's loop buffer, now owned by the caller (freed with the last
// reference); null on threads without one (io_uring ring threads, the pools).
std::shared_ptr<void> take_loop_buffer();

// A pool of threads that runs jobs: resumed requests, and control requests that wait.
//
// Continuations of the lock manager run on whichever thread settles a wait (one
// releasing locks in a commit, the lock timer); they only post to the resume pool, so a
// commit's reply is not delayed by the handlers it unblocks and no handler runs on the
// releasing thread's stack. Control requests that wait for other requests or for the
// kernel (begin, commit, abort, sync: a commit waits for the kernel to drop cached
// names, which may wait for a directory lock that a request queued behind it holds) run
// on the growing control pool, never on a thread that reads requests.
class Pool {
 public:
  ~Pool() { stop(); }
  // Starts `threads` threads; with `grow`, post() adds one whenever no thread is idle.
  void start(unsigned threads, bool grow = false) EXCLUDES(mu_);
  // Runs `job` on a pool thread; after stop(), on the calling thread.
  void post(std::function<void()> job) EXCLUDES(mu_);
  // Runs what is queued, then joins the threads.
  void stop() EXCLUDES(mu_);
  // Is the calling thread one of this pool's?
  bool mine() const;

 private:
  void loop() EXCLUDES(mu_);
  Mutex mu_{LockRank::kPool};
  CondVar cv_;
  std::deque<std::function<void()>> jobs_ GUARDED_BY(mu_);
  bool running_ GUARDED_BY(mu_) = false;
  bool grow_ GUARDED_BY(mu_) = false;
  size_t idle_ GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_ GUARDED_BY(mu_);
};

}  // namespace txnfs::park
