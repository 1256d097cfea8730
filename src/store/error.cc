#include "store/error.h"

namespace txnfs {

void throw_errno(const std::string &what, int err) { throw Error(err, what); }

int errno_in(const std::exception &e) noexcept {
  auto *se = dynamic_cast<const std::system_error *>(&e);
  if (!se) return 0;
  const std::error_category &c = se->code().category();
  return c == std::generic_category() || c == std::system_category() ? se->code().value() : 0;
}

}  // namespace txnfs
