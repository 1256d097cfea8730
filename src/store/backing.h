// Identity of objects in the backing file system, independent of their names.
//
// A backing object is named by its file handle (name_to_handle_at); for XFS the
// handle holds the inode number and generation, so (ino, generation) identifies an
// object for its whole life and never names a later object that reuses the number.
#pragma once
#include <sys/stat.h>

#include <cstdint>
#include <string>

#include "store/unique_fd.h"

namespace txnfs {

struct BackingId {
  uint64_t ino = 0;
  uint64_t generation = 0;
  std::string fh;  // serialized handle: 4-byte handle_type, then the handle bytes
};

// Identity of the object `fd` refers to (an O_PATH fd is fine). Throws Error.
BackingId backing_id(int fd);
// The same, given the object's stat (one system call fewer).
BackingId backing_id(int fd, const struct stat &st);

// Opens the object named by a serialized handle. `mount_fd` is any fd (not O_PATH) on the same
// file system. On failure the UniqueFd is empty and err() says why (ESTALE when the
// object is gone).
UniqueFd open_by_fh(int mount_fd, const std::string &fh, int flags);

// "/proc/self/fd/N": lets path-only calls (chmod, *xattr) act on the object an fd
// (also an O_PATH fd, also of a symlink) refers to.
inline std::string proc_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

}  // namespace txnfs
