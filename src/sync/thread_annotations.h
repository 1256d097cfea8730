// Clang thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html).
// Under clang with -Wthread-safety they let the compiler check that every access to a
// GUARDED_BY member happens with its mutex held, that REQUIRES functions are only
// called with it held, and (with -Wthread-safety-beta) ACQUIRED_AFTER orderings within
// a function. Under GCC they expand to nothing. `meson setup -Dthread_safety=true` (with
// CXX=clang++) turns the analysis on as errors; scripts/test does that in build-tsa.
#pragma once

#if defined(__clang__)
#define TXNFS_TSA(x) __attribute__((x))
#else
#define TXNFS_TSA(x)
#endif

#define CAPABILITY(x) TXNFS_TSA(capability(x))
#define SCOPED_CAPABILITY TXNFS_TSA(scoped_lockable)
#define GUARDED_BY(x) TXNFS_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) TXNFS_TSA(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) TXNFS_TSA(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) TXNFS_TSA(acquired_after(__VA_ARGS__))
#define REQUIRES(...) TXNFS_TSA(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) TXNFS_TSA(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) TXNFS_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) TXNFS_TSA(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) TXNFS_TSA(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) TXNFS_TSA(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) TXNFS_TSA(assert_capability(x))
#define RETURN_CAPABILITY(x) TXNFS_TSA(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS TXNFS_TSA(no_thread_safety_analysis)
