// Serving a store: the checks that refuse a bad store before anything is touched,
// the FUSE session, daemonising, and the multi-threaded request loop.
#pragma once
#include <string>
#include <vector>

#include "fs.h"

namespace txnfs {

struct MountOptions {
  std::string store, mountpoint, pid_file;
  bool foreground = false;
  std::vector<std::string> fuse_opts;  // extra -o options
  FsOptions fs;
};

// Mounts and serves until unmounted. Throws Error (having changed nothing) when the
// store cannot be served; returns the process exit status otherwise.
int run_mount(const MountOptions &opts);

}  // namespace txnfs
