// Helpers shared by the benchmark programs: interruption, errors, clocks, labels.
#pragma once
#include <sys/statfs.h>

#include <atomic>
#include <cerrno>
#include <ctime>
#include <stdexcept>
#include <string>
#include <system_error>

#include <fmt/format.h>

namespace bench {

// Set by SIGINT/SIGTERM; long loops poll check_interrupt() and unwind (cleaning up).
inline std::atomic<bool> g_interrupted{false};
extern "C" inline void on_signal(int) { g_interrupted.store(true); }

struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted") {}
};

inline void check_interrupt() {
  if (g_interrupted.load(std::memory_order_relaxed)) throw Interrupted();
}

[[noreturn]] inline void sys_fail(const std::string &what, const std::string &path) {
  int e = errno;
  throw std::system_error(e, std::generic_category(), fmt::format("{} {}", what, path));
}

inline double now_mono() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// A short name of the file system `path` is on, for the report.
inline std::string fs_type_name(const std::string &path) {
  struct statfs sf {};
  if (statfs(path.c_str(), &sf) != 0) return "?";
  switch (static_cast<uint64_t>(sf.f_type)) {
    case 0x58465342: return "xfs";
    case 0x65735546: return "fuse";
    case 0xEF53: return "ext4";
    case 0x01021994: return "tmpfs";
    case 0x9123683E: return "btrfs";
    case 0x794c7630: return "overlay";
    default: return fmt::format("0x{:x}", static_cast<uint64_t>(sf.f_type));
  }
}

}  // namespace bench
