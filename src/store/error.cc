#include "error.h"

#include <cstring>

namespace txnfs {

void throw_errno(const std::string &what, int err) {
  throw Error(what + ": " + std::strerror(err));
}

}  // namespace txnfs
