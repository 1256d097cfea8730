// The one clock of the benchmarks: CLOCK_MONOTONIC, as `perf record -k mono` stamps its
// events (bench/perf-steps.py matches the two).
#pragma once
#include <ctime>

namespace bench {

// Seconds on CLOCK_MONOTONIC. Inline: it brackets every timed step.
inline double now_mono() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace bench
