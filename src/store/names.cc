#include "store/names.h"

#include <cerrno>
#include <climits>

namespace txnfs {

int check_name(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return EINVAL;
  if (name.find('/') != std::string_view::npos || name.find('\0') != std::string_view::npos)
    return EINVAL;
  if (name.size() > NAME_MAX) return ENAMETOOLONG;
  return 0;
}

}  // namespace txnfs
