// File-system primitives shared by the undo log (writer) and the undo executor:
// range clones with a copy fallback, xattr sets, and removal confined to a directory.
// Internal to src/recovery.
#pragma once
#include <sys/stat.h>
#include <sys/types.h>

#include <cerrno>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "store/unique_fd.h"

#include "store/backing.h"

namespace txnfs::undo_io {

// Block size for FICLONERANGE alignment on the file system of `fd` (power of two).
uint64_t clone_block(int fd);

// Makes [off, off+len) of `dst` equal to the same range of `src`. With `clone`, the
// block-aligned head is cloned (FICLONERANGE; falls back to copying when the file
// system cannot) and an unaligned tail copied; else everything is copied with
// pread/pwrite. `src` must be readable and `dst` writable. 0 or an errno.
int put_range(int src, int dst, uint64_t off, uint64_t len, bool clone);

// Clones [off, off+len) of src into dst at the same offsets, in one FICLONERANGE. The
// range must be block-aligned, except that it may end at src's EOF. len > 0.
int clone_range(int src, int dst, uint64_t off, uint64_t len);

// Copies [off, off+len) of src to dst at the same offsets. 0 or an errno.
int copy_range(int src, int dst, uint64_t off, uint64_t len);

// Every xattr of the object `path` names (a proc_path). 0 or an errno; ENOTSUP and
// ENODATA races read as "no xattrs".
using Xattrs = std::map<std::string, std::string>;
int read_xattrs(const std::string &path, Xattrs &out);

// Entries of the directory `dirfd` (any fd of it, also O_PATH), without "." and "..",
// with their d_type (DT_UNKNOWN possible). Reads through a new open file description, so
// `dirfd`'s offset is untouched. Throws Error.
struct DirEntry {
  std::string name;
  unsigned char type;
};
std::vector<DirEntry> list_dir(int dirfd);

// Removes `name` in `dirfd` and, for a directory, everything below it. Never follows
// symlinks and never leaves the file system of `dirfd`. A missing name is fine.
// `before`, if given, is called for every object below `name` just before it is
// removed (its directory's fd, its name there, its stat). Throws Error.
using BelowHook = std::function<void(int dirfd, const std::string &name, const struct stat &st)>;
void remove_tree(int dirfd, const std::string &name, const BelowHook &before = {});

// True when `e` means the backing file system cannot be trusted to go on (I/O error,
// out of space, read-only, corruption): such errors abort an undo instead of being
// reported and skipped.
bool fatal_errno(int e);

}  // namespace txnfs::undo_io
