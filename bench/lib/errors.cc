#include "bench/lib/errors.h"

#include <cerrno>
#include <exception>
#include <system_error>

#include <fmt/format.h>

#include "bench/lib/interrupt.h"

namespace bench {

void sys_fail(const std::string &what, const std::string &path) {
  int e = errno;  // before anything below can change it
  throw std::system_error(e, std::generic_category(), fmt::format("{} {}", what, path));
}

int exit_status_of(std::string_view prog, std::string_view on_interrupt,
                   const std::function<int()> &body) {
  try {
    return body();
  } catch (const Interrupted &) {
    fmt::print(stderr, "{}: {}\n", prog, on_interrupt);
    return 130;
  } catch (const std::exception &e) {
    fmt::print(stderr, "{}: error: {}\n", prog, e.what());
    return 1;
  }
}

}  // namespace bench
