#include "bench/lib/files.h"

#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "bench/lib/errors.h"

namespace bench {

std::string fs_type_name(const std::string &path) {
  struct statfs sf {};
  if (statfs(path.c_str(), &sf) != 0) return "?";
  switch (static_cast<uint64_t>(sf.f_type)) {
    case 0x58465342:
      return "xfs";
    case 0x65735546:
      return "fuse";
    case 0xEF53:
      return "ext4";
    case 0x01021994:
      return "tmpfs";
    case 0x9123683E:
      return "btrfs";
    case 0x794c7630:
      return "overlay";
    default:
      return fmt::format("0x{:x}", static_cast<uint64_t>(sf.f_type));
  }
}

uint64_t kernel_dev(dev_t dev) { return (static_cast<uint64_t>(major(dev)) << 20) | minor(dev); }

void write_all(int fd, const char *p, size_t n, uint64_t off, bool positional,
               const std::string &what) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = positional ? pwrite(fd, p + done, n - done, static_cast<off_t>(off + done))
                           : write(fd, p + done, n - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      sys_fail("write", what);
    }
    done += static_cast<size_t>(w);
  }
}

}  // namespace bench
