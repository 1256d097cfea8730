#include "lib/files.h"

#include <sys/statfs.h>

#include <cstdint>

#include <fmt/format.h>

namespace bench {

std::string fs_type_name(const std::string &path) {
  struct statfs sf {};
  if (statfs(path.c_str(), &sf) != 0) return "?";
  switch (static_cast<uint64_t>(sf.f_type)) {
    case 0x58465342: return "xfs";
    case 0x65735546: return "fuse";
    case 0xEF53: return "ext4";
    case 0x01021994: return "tmpfs";
    case 0x9123683E: return "btrfs";
    case 0x794c7630: return "overlay";
    default: return fmt::format("0x{:x}", static_cast<uint64_t>(sf.f_type));
  }
}

}  // namespace bench
