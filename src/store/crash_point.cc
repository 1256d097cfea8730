#include "store/crash_point.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "store/error.h"

namespace txnfs::crash {

int armed = -1;

namespace {

std::atomic<long> remaining{0};
long pause_ms = 0;  // TXNFS_PAUSE_AT: every arrival sleeps this long instead
std::string parse_error;
void (*test_crash)() = nullptr;  // arm_for_test: called instead of _exit

// Reads TXNFS_CRASH_AT=NAME:COUNT (or TXNFS_PAUSE_AT=NAME:MS) once, before main() runs.
struct Parse {
  Parse() {
    const char *v = std::getenv("TXNFS_CRASH_AT");
    const char *pause = std::getenv("TXNFS_PAUSE_AT");
    if (pause && *pause) {
      if (v && *v) {
        parse_error = "TXNFS_CRASH_AT and TXNFS_PAUSE_AT are both set: arm one point at a time";
        return;
      }
      v = pause;
    }
    if (!v || !*v) return;
    const char *var = pause && *pause ? "TXNFS_PAUSE_AT=" : "TXNFS_CRASH_AT=";
    std::string s = v;
    auto colon = s.rfind(':');
    std::string name = colon == std::string::npos ? s : s.substr(0, colon);
    long count = 1;
    if (colon != std::string::npos) {
      char *end = nullptr;
      errno = 0;
      count = std::strtol(s.c_str() + colon + 1, &end, 10);
      if (errno || end == s.c_str() + colon + 1 || *end || count < 1) {
        parse_error = var + s + ": the number after ':' must be a positive integer";
        return;
      }
    }
    for (size_t k = 0; k < kCount; k++)
      if (name == kPoints[k].name) {
        if (pause && *pause) pause_ms = count;
        else remaining = count;
        armed = int(k);
        return;
      }
    parse_error = var + s + ": no crash point named '" + name +
                  "' (txnfs crash-points lists them)";
  }
} parse;

}  // namespace

void reached(int index) {
  if (index != armed) return;
  if (pause_ms > 0) {  // a test widening a race window: the process goes on
    ::usleep(useconds_t(pause_ms * 1000));
    return;
  }
  if (remaining.fetch_sub(1) != 1) return;
  if (test_crash) {
    armed = -1;
    test_crash();
    return;
  }
  // Async-signal-safe and allocation-free from here on: the process is "crashing".
  char msg[256];
  const char *name = kPoints[index].name;
  size_t n = 0;
  auto put = [&](const char *p) {
    while (*p && n < sizeof msg - 1) msg[n++] = *p++;
  };
  put("txnfs: crash point ");
  put(name);
  put(" reached: exiting with status 137\n");
  [[maybe_unused]] auto w = ::write(2, msg, n);
  ::_exit(137);
}

void arm_for_test(std::string_view name, long count, void (*crash)()) {
  for (size_t k = 0; k < kCount; k++)
    if (name == kPoints[k].name) {
      remaining = count;
      test_crash = crash;
      armed = int(k);
      return;
    }
  throw Error("no crash point named '" + std::string(name) + "'");
}

void disarm() {
  armed = -1;
  test_crash = nullptr;
}

void check_environment() {
  if (!parse_error.empty()) throw Error(parse_error);
}

}  // namespace txnfs::crash
