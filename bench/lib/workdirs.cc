#include "bench/lib/workdirs.h"

#include <sys/stat.h>

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "bench/lib/errors.h"

namespace bench {

std::string WorkDirs::make(const std::string &path) {
  if (mkdir(path.c_str(), 0755) != 0) sys_fail("mkdir", path);
  dirs_.push_back(path);
  return path;
}

void WorkDirs::remove(const std::string &path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) throw std::system_error(ec, "remove_all " + path);
  std::erase(dirs_, path);
}

void WorkDirs::remove_left() {
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
    std::error_code ec;
    std::filesystem::remove_all(*it, ec);
    if (ec) fmt::print(stderr, "{}: warning: cleanup of {} failed: {}\n", prog_, *it, ec.message());
  }
  dirs_.clear();
}

}  // namespace bench
