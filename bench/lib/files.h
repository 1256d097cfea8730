// File-system helpers the benchmark programs share.
#pragma once
#include <string>

namespace bench {

// A short name of the file system PATH is on ("xfs", "fuse", ...; "?" when statfs
// fails, the magic number in hex when unknown), for the report.
std::string fs_type_name(const std::string &path);

}  // namespace bench
