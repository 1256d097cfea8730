#include "compound_bridge/bridge/log.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace txnfs::bridge {

bool Log::open(const std::string &path, std::string *error) {
  if (path.empty()) return true;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = "log " + path + ": " + std::strerror(errno);
    return false;
  }
  fd_ = fd;
  return true;
}

// "2026-11-21 20:31:40.432 txnfs-bridge[TID]: MESSAGE\n"
void Log::write_line(const std::string &message) {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  ::localtime_r(&ts.tv_sec, &tm);
  char when[32];
  std::strftime(when, sizeof when, "%F %T", &tm);
  std::string text = fmt::format("{}.{:03} txnfs-bridge[{}]: {}\n", when, ts.tv_nsec / 1000000,
                                 ::syscall(SYS_gettid), message);
  // A log line that cannot be written has nowhere else to go.
  [[maybe_unused]] ssize_t n = ::write(fd_, text.data(), text.size());
}

}  // namespace txnfs::bridge
