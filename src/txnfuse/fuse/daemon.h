// Serving a store: the checks that refuse a bad store before anything is touched,
// the FUSE session, daemonising, and the multi-threaded request loop.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "txnfuse/fuse/fs.h"
#include "txnfuse/txn/txn_limits.h"

namespace txnfs {

struct MountOptions {
  std::string store, mountpoint, pid_file, log_file;
  bool foreground = false;
  bool force = false;  // serve a store marked damaged (see the damage table in schema.sql)
  std::vector<std::string> fuse_opts;  // extra -o options
  FsOptions fs;
  bool undo_sync = false;  // fsync the undo log after every step (for measurement)
  std::chrono::milliseconds lock_timeout = TxnLimits::kDefaultLockTimeout;
  uint64_t max_ops = TxnLimits::kDefaultMaxOps;
  uint64_t max_backup_bytes = TxnLimits::kDefaultMaxBackupBytes;
  // O_PATH fds the daemon keeps open for objects the kernel knows (txn/fd_cache.h);
  // 0: FdCache::default_capacity(), half the open-file hard limit.
  uint64_t fd_cache = 0;
  std::chrono::milliseconds lazy_flush = TxnLimits::kDefaultLazyFlush;
  // FUSE over io_uring when the kernel offers it (else /dev/fuse, with one log line).
  bool io_uring = false;
  // Threads reading /dev/fuse; 0: max(2, number of CPUs). Requests waiting for locks
  // occupy none (fuse/park.h).
  unsigned threads = 0;
  // The node's cluster configuration (docs/cluster.md); empty: not in a cluster.
  std::string cluster_conf;
};

// The /dev/fuse pool size for `opts.threads`.
unsigned fuse_threads(const MountOptions &opts);

// Mounts and serves until unmounted. Throws Error (having changed nothing) when the
// store cannot be served; returns the process exit status otherwise.
int run_mount(const MountOptions &opts);

}  // namespace txnfs
