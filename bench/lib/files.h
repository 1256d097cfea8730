// File-system helpers the benchmark programs share.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace bench {

// A short name of the file system PATH is on ("xfs", "fuse", ...; "?" when statfs
// fails, the magic number in hex when unknown), for the report.
std::string fs_type_name(const std::string &path);

// DEV in the kernel's own encoding (major << 20 | minor): the number tracepoints print,
// for a FUSE mount its connection id.
uint64_t kernel_dev(dev_t dev);

// True for the directory entries "." and "..". Inline: timed readdir loops call it.
inline bool is_dot_or_dotdot(const char *name) {
  return name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0));
}

// Writes P[0, N) to FD, at offset OFF with pwrite() when POSITIONAL, else with write()
// at the file offset; retries short writes and EINTR; throws naming WHAT on an error.
void write_all(int fd, const char *p, size_t n, uint64_t off, bool positional,
               const std::string &what);

}  // namespace bench
