#include "lib/errors.h"

#include <cerrno>
#include <system_error>

#include <fmt/format.h>

namespace bench {

void sys_fail(const std::string &what, const std::string &path) {
  int e = errno;  // before anything below can change it
  throw std::system_error(e, std::generic_category(), fmt::format("{} {}", what, path));
}

}  // namespace bench
