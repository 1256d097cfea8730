// `txnfs umount [--force] MOUNTPOINT` (main.cc registers it). MOUNTPOINT may also name
// the store of a txnfs mount (the mount's source), when it is no mount point itself.
//
// Without --force: fusermount3 -u, which ends the daemon once the kernel lets the mount go.
// With --force: for a daemon that is dead or no longer answers (killed, stopped, or a
// thread of it stuck in the kernel after kill -9): the mount's FUSE connection is
// aborted through fusectl, so every request waiting on it fails with ENOTCONN and the
// daemon's reads end, and the mount point is detached. Nothing on the mount itself is
// touched (no stat of it, which would hang): the mount is found in /proc/self/mountinfo.
// The next `txnfs mount` rolls back whatever transactions were open. Over FUSE's io_uring
// a request the daemon had already taken fails only once the daemon's process ends.
#pragma once
#include <string>

namespace txnfs::cli {

// Exit status: 0 unmounted; 1 error (printed, or thrown as Error).
int umount_command(const std::string &mountpoint, bool force);

}  // namespace txnfs::cli
