// The /dev/fuse request loop: a small fixed pool of threads, each reading a request into
// its buffer and running its handler. No handler waits for a lock of the LockManager
// (park.h), so the pool need not grow with the number of waiting requests: a parked
// request keeps its thread's buffer, and the thread reads on into a fresh one.
//
// With FUSE over io_uring the kernel delivers requests to libfuse's ring threads
// instead; this loop then still reads what comes over /dev/fuse (INIT, interrupts).
#pragma once

#define FUSE_USE_VERSION 318
#include <fuse_lowlevel.h>

namespace txnfs {

// Serves `se` with `threads` threads until it is unmounted or told to exit
// (fuse_session_exit, e.g. by a signal). Returns 0, or the negative errno that ended it.
int serve_dev_fuse(fuse_session *se, unsigned threads);

}  // namespace txnfs
