// The options of `txnfs mount -o` (and so of `mount -t fuse.txnfs -o`): mount(8)'s mount
// flags, `fsname=`, `io_uring`, and whatever else libfuse takes.
//
// libfuse's own mount (fuse_session_mount as root) knows only part of mount(8)'s flags:
// not atime, diratime, relatime, strictatime, lazytime and their negations, which
// mount(8) hands a helper (`-o rw,relatime`). And it starts from nosuid,nodev, where
// mount(8) starts from suid,dev and leaves out the flags that are defaults: an fstab line
// with `suid,dev` reaches the helper as `rw`. So txnfs reads the flags itself, starting
// from mount(8)'s defaults for root; hands libfuse each flag in a form it knows; and sets
// what libfuse cannot (strictatime, lazytime) with one remount of the new mount.
#pragma once
#include <string>
#include <vector>

namespace txnfs {

struct MountFlags {
  unsigned long ms = 0;            // MS_* flags for mount(2)
  std::string fsname;              // the mount's source (fsname=); empty: the store's path
  bool io_uring = false;           // `io_uring` was among the options
  bool nopassthrough = false;      // `nopassthrough`: no FUSE passthrough (views.h)
  std::vector<std::string> other;  // options for libfuse as given (max_read=, blksize=, ...)
};

// Reads the comma-separated lists of `txnfs mount -o` (a backslash escapes the next
// character, as libfuse reads them). `root`: the mount is made by root, so mount(8)'s
// defaults apply (suid, dev, exec, relatime); libfuse mounts others through
// fusermount3, which always adds nosuid and nodev.
MountFlags parse_mount_options(const std::vector<std::string> &lists, bool root);

// The -o options for libfuse's fuse_session_new: `base` first, then the source
// (fsname=, `source` when f.fsname is empty), the mount flags libfuse knows, the others.
std::string libfuse_options(const MountFlags &f, const std::string &base,
                            const std::string &source);

// MS_* flags libfuse's mount cannot set; when there are any, remount_flags() gives the
// flags of the remount that sets them (all of the mount's flags, as remount wants).
unsigned long flags_libfuse_lacks(const MountFlags &f);
unsigned long remount_flags(const MountFlags &f);

}  // namespace txnfs
