// Validation of single path components that reach txnfs from outside the kernel
// (control requests, the NFS bridge, the CLI). The kernel checks names of FUSE
// requests itself; these checks keep other callers to the same rules.
#pragma once
#include <string_view>

namespace txnfs {

// 0 when `name` is a valid new directory entry name, else an errno:
// EINVAL for "", ".", "..", or names with '/' or NUL; ENAMETOOLONG over NAME_MAX.
int check_name(std::string_view name);

}  // namespace txnfs
