// The bridge's log: one line per event, appended with a single write(2) so that lines of
// concurrent Ganesha worker threads never interleave. Goes to the `log` file of the
// configuration, or to stderr.
#pragma once
#include <string>
#include <utility>

#include <fmt/format.h>

namespace txnfs::bridge {

class Log {
 public:
  // Opens PATH for appending (empty: stderr). False with *error set if it cannot.
  bool open(const std::string &path, std::string *error);

  template <typename... Args>
  void line(fmt::format_string<Args...> format, Args &&...args) {
    write_line(fmt::format(format, std::forward<Args>(args)...));
  }

 private:
  void write_line(const std::string &message);
  int fd_ = 2;
};

}  // namespace txnfs::bridge
