#include "store/fault_point.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include <spdlog/spdlog.h>

#include "store/error.h"

namespace txnfs::fault {

int armed = -1;

namespace {

std::atomic<long> arrivals{0};
long first = 0;       // the arrival that fails first (from 1)
bool onward = false;  // "COUNT+": it and every later one
int injected = 0;     // EIO or ENOSPC
std::string parse_error;

// Parses TXNFS_FAIL_AT=NAME:COUNT[+]:ERRNO and arms the point; "" or what is wrong.
std::string parse(const std::string &s) {
  auto bad = [&](const std::string &why) { return "TXNFS_FAIL_AT=" + s + ": " + why; };
  auto c2 = s.rfind(':');
  auto c1 = c2 == std::string::npos || c2 == 0 ? std::string::npos : s.rfind(':', c2 - 1);
  if (c1 == std::string::npos)
    return bad(
        "expected NAME:COUNT:ERRNO (COUNT+ for every arrival from COUNT on; ERRNO "
        "EIO or ENOSPC)");
  std::string name = s.substr(0, c1), count = s.substr(c1 + 1, c2 - c1 - 1), err = s.substr(c2 + 1);
  if (!count.empty() && count.back() == '+') {
    onward = true;
    count.pop_back();
  }
  char *end = nullptr;
  errno = 0;
  long n = count.empty() ? 0 : std::strtol(count.c_str(), &end, 10);
  if (count.empty() || errno || *end || n < 1)
    return bad("the count must be a positive integer, optionally followed by '+'");
  if (err == "EIO") injected = EIO;
  else if (err == "ENOSPC") injected = ENOSPC;
  else return bad("the errno must be EIO or ENOSPC, not '" + err + "'");
  for (size_t k = 0; k < kCount; k++)
    if (name == kPoints[k].name) {
      first = n;
      armed = int(k);
      return "";
    }
  return bad("no fault point named '" + name + "' (txnfs fault-points lists them)");
}

// Reads the variable once, before main() runs.
struct Parse {
  Parse() {
    const char *v = std::getenv("TXNFS_FAIL_AT");
    if (v && *v) parse_error = parse(v);
  }
} parsed;

}  // namespace

int reached(int index) {
  if (index != armed) return 0;
  long n = arrivals.fetch_add(1) + 1;
  if (n < first || (n > first && !onward)) return 0;
  spdlog::warn("fault point {} (arrival {}): injecting {}", kPoints[index].name, n,
               injected == EIO ? "EIO" : "ENOSPC");
  return injected;
}

void check_environment() {
  if (!parse_error.empty()) throw Error(parse_error);
}

}  // namespace txnfs::fault
