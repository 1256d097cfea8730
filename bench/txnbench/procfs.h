// The daemon seen from /proc: its memory and thread count (/proc/PID/status) and the
// CPU time it has used (/proc/PID/stat).
#pragma once
#include <sys/types.h>

#include <cstdint>

namespace txnbench {

// VmRSS, VmHWM (KiB) and Threads of /proc/PID/status.
struct ProcMem {
  uint64_t rss_kib = 0, hwm_kib = 0, threads = 0;
};

// The ProcMem of PID; zeroes for what cannot be read.
ProcMem read_mem(pid_t pid);

// User+system CPU seconds of the whole process (all threads, also exited ones).
double read_cpu(pid_t pid);

}  // namespace txnbench
