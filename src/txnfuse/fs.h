// Fs — the state one txnfs daemon serves a store with, shared by all FUSE ops.
//
// The request path of every op (ops_*.cc) reads top to bottom: resolve the nodeid
// to an Inode, do the backing call on the XFS tree, record handle-table changes in
// MetaDb, reply. Kernel caches stay on (entries, attributes, pages, directory
// listings) because every change to the tree passes through this daemon.
//
// The daemon's mutexes follow one hierarchy, src/sync/lock_order.h (checked by clang's
// thread-safety analysis and, in debug builds, at run time); a request unanswered for
// 30 s is reported as stalled (stall_watchdog.h).
#define FUSE_USE_VERSION 312
#pragma once
#include <fcntl.h>
#include <fuse_lowlevel.h>

#include <atomic>
#include <memory>
#include <string>

#include "inode_table.h"
#include "invalidator.h"
#include "lock_manager.h"
#include "metadb.h"
#include "pending.h"
#include "store.h"

namespace txnfs {

struct FsOptions {
  double entry_timeout = 3600;  // seconds the kernel may cache a name -> inode
  double attr_timeout = 3600;   // seconds the kernel may cache attributes
  bool undo_sync = false;       // fsync the undo log after every step (for measurement)
};

class TxnManager;

struct Fs {
  Fs();
  ~Fs();
  StorePaths paths;
  FsOptions opts;
  int tree_fd = -1;  // fd of STORE/tree; also the mount fd for open_by_fh
  int backups_fd = -1;  // fd of STORE/.txnfs/backups, where undo logs live
  bool reflink = true;  // back data up by range clones (else by copying)
  uint64_t tree_ino = 0;
  std::unique_ptr<MetaDb> db;
  InodeTable inodes;
  InodePtr root;
  LockManager locks;
  Invalidator inval;
  PendingEntries pending;  // committed state of entries open transactions changed
  std::unique_ptr<TxnManager> txns;
  // Plain requests running without locks because no transaction was open when they
  // started; TxnManager::begin waits for them to finish.
  std::atomic<int> unlocked_inflight{0};
  uint64_t recoveries = 0;  // transactions rolled back by recovery at mount

  // nodeid the kernel sees for a backing inode number.
  uint64_t nodeid_of(uint64_t ino) const { return ino == tree_ino ? FUSE_ROOT_ID : ino; }
};

// The Fs a request belongs to.
inline Fs &fs_of(fuse_req_t req) { return *static_cast<Fs *>(fuse_req_userdata(req)); }

// The Inode for a nodeid the kernel holds. The kernel only sends nodeids it was
// given, so a miss is a daemon bug; it yields null and callers reply ESTALE.
InodePtr inode_of(fuse_req_t req, fuse_ino_t nodeid);

// Looks up `name` in `parent`, adds a kernel lookup, records the object in the
// handle table if it is not there yet, and fills `e`. Returns 0 or an errno.
int do_lookup(Fs &fs, const InodePtr &parent, const char *name, fuse_entry_param *e);

// fi->fh of an open file: the backing fd, plus kDirectIoFh when the kernel serves the
// open without its page cache (FOPEN_DIRECT_IO). Such writes reach the daemon without
// the set-ID and capability clearing the kernel does before a cached write, so the
// write handler does it (see kill_privs in ops_data.cc).
inline constexpr uint64_t kDirectIoFh = uint64_t(1) << 32;
inline int fd_of(const fuse_file_info *fi) { return int(fi->fh & 0xffffffffu); }
inline void set_fh(fuse_file_info *fi, int fd) {
  fi->fh = uint64_t(unsigned(fd)) | (fi->direct_io ? kDirectIoFh : 0);
}
// Open flags the backing file is opened with for a kernel open with `flags`. O_DIRECT
// is not passed on: the kernel already bypasses its page cache for such an open
// (direct_io), and the buffers FUSE hands over have no O_DIRECT alignment.
inline int backing_open_flags(int flags) {
  return (flags | O_CLOEXEC) & ~(O_NOFOLLOW | O_CREAT | O_EXCL | O_NOCTTY | O_DIRECT);
}

// Clears privileges after a write, truncation or fallocate by the caller of `req`, as
// XFS does (ops_data.cc). `fd` may be O_PATH. Returns 0 or an errno.
int kill_privs(fuse_req_t req, int fd, bool direct);

// "/proc/self/fd/N" for an O_PATH fd, to reach calls that take only paths.
std::string proc_path(int fd);

// The low-level operation table.
fuse_lowlevel_ops make_ops();

}  // namespace txnfs
