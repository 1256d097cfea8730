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
#define FUSE_USE_VERSION 318
#pragma once
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <sys/stat.h>

#include <atomic>
#include <memory>
#include <string>

#include "txnfuse/fuse/inode_table.h"
#include "txnfuse/fuse/invalidator.h"
#include "txnfuse/fuse/listings.h"
#include "txnfuse/fuse/park.h"
#include "txnfuse/fuse/views.h"
#include "txnfuse/txn/resolver.h"
#include "txnfuse/txn/txn_env.h"

namespace txnfs {

struct FsOptions {
  double entry_timeout = 3600;  // seconds the kernel may cache a name -> inode
  double attr_timeout = 3600;   // seconds the kernel may cache attributes
};

class TxnManager;

// The store-side state (TxnEnv: fds, MetaDb, locks, committed view) plus the FUSE side.
struct Fs : TxnEnv {
  Fs();
  ~Fs();
  FsOptions opts;
  InodeTable inodes;
  Views views;  // transactions' own kernel inodes (views.h)
  InodePtr root;
  Invalidator inval;          // the kernel's caches; TxnEnv::cache points here
  ListingSnapshots listings;  // what plain listings were served while transactions were open
  std::unique_ptr<TxnManager> txns;
  std::unique_ptr<Resolver> resolver;  // in a cluster: settles prepared transactions (resolver.h)
  park::Pool resumer;          // runs parked requests again once their lock is granted
  park::Pool control;          // runs control requests that wait (ops_ctl.cc)
  bool want_io_uring = false;  // -o io_uring: take FUSE over io_uring if the kernel offers it
  std::atomic<bool> io_uring{false};  // requests arrive over io_uring (seen by a request)
  // Passthrough for the files a transaction makes, opened through its view (views.h),
  // unless -o nopassthrough; with the session's /dev/fuse fd, set before requests.
  bool want_passthrough = true;
  int dev_fd = -1;

  // Drops n lookups of `nodeid`. When the kernel has forgotten the object and it has no
  // name left, its O_PATH fd goes too (FdCache::drop_unlinked): nothing else may then
  // keep its blocks.
  void forget(uint64_t nodeid, uint64_t n) {
    if (InodePtr gone = inodes.forget(nodeid, n)) fds.drop_unlinked(gone->ino);
  }
};

// The Fs a request belongs to.
inline Fs &fs_of(fuse_req_t req) { return *static_cast<Fs *>(fuse_req_userdata(req)); }

// The Inode for a nodeid the kernel holds, or null (callers reply ESTALE) if the object
// is gone (Inode::gone: its creation was rolled back). The kernel only sends nodeids
// it was given, so any other miss is a daemon bug.
InodePtr inode_of(fuse_req_t req, fuse_ino_t nodeid);

// Looks up `name` in `parent`, adds a kernel lookup, records the object in the
// handle table if it is not there yet, and fills `e`. Returns 0 or an errno.
int do_lookup(Fs &fs, const InodePtr &parent, const char *name, fuse_entry_param *e);

class Op;
// Makes `e` (a found entry, for LOOKUP or READDIRPLUS) what op's requester may see and
// the kernel may keep: the committed attributes of an object other open transactions
// changed, and the cache lifetimes (none for the attributes when `volatile_entry` or
// when they were replaced: see committed_attrs_for in ops_entry.cc).
void finish_entry(const Op &op, fuse_entry_param &e, bool volatile_entry);

// fi->fh of an open file: the backing fd, plus kDirectIoFh when the kernel serves the
// open without its page cache (FOPEN_DIRECT_IO).
// kTxnWriterFh marks an open a transaction made with write access, known to
// TxnManager::opened_for_writing(): the kernel's writeback of a mapping names no caller.
inline constexpr uint64_t kDirectIoFh = uint64_t(1) << 32;
inline constexpr uint64_t kTxnWriterFh = uint64_t(1) << 33;
// kPassthroughFh: the kernel reads and writes the backing file itself (Views::passthrough_open).
inline constexpr uint64_t kPassthroughFh = uint64_t(1) << 34;
inline int fd_of(const fuse_file_info *fi) { return int(fi->fh & 0xffffffffu); }
inline void set_fh(fuse_file_info *fi, int fd) {
  fi->fh = uint64_t(unsigned(fd)) | (fi->direct_io ? kDirectIoFh : 0);
}
// (Opens inside handlers use Op::set_fh, which also registers a transaction's writer.)
// Open flags the backing file is opened with for a kernel open with `flags`. O_DIRECT
// is not passed on: the kernel already bypasses its page cache for such an open
// (direct_io), and the buffers FUSE hands over have no O_DIRECT alignment.
inline int backing_open_flags(int flags) {
  return (flags | O_CLOEXEC) & ~(O_NOFOLLOW | O_CREAT | O_EXCL | O_NOCTTY | O_DIRECT);
}
// A kernel open that writes with O_DIRECT. The kernel drops the file's cached pages
// before each such write (FOPEN_DIRECT_IO), not after it: a page that a reader through
// another open file reads in between keeps the old bytes (an asynchronous write widens
// the gap). So from a plain one on, plain opens of the file bypass the page cache too
// (Inode::txn_written), and each drops what the kernel cached of it.
inline bool direct_writer(int flags) {
  return (flags & O_DIRECT) && (flags & O_ACCMODE) != O_RDONLY;
}

// Set-ID bits: what XFS would clear for the caller, which the daemon (root) must clear
// itself (setid.cc has the rules).
enum class SetidChange {
  kData,   // a write, truncation, fallocate or copy into a regular file
  kChown,  // a chown, also one that changes no id
  kAcl,    // an access ACL set
};
// The bits XFS clears from an object with attributes `st` when the caller of `req` makes
// change `why`. `kernel_kill`: the request's kill flag (the kernel found the caller
// without CAP_FSETID); without it the daemon asks /proc.
mode_t setid_bits_to_clear(fuse_req_t req, const struct stat &st, SetidChange why,
                           bool kernel_kill = false);
// A SETATTR that sets nothing is chown(f, -1, -1), or the kernel clearing set-ID bits
// before a write (file_remove_privs); the request does not say which. 0 if the caller
// may clear the bits `clear` (kChown's) from an object with attributes `st` that way,
// else EPERM: XFS refuses the mode change such a chown implies to a caller that neither
// owns the object nor has CAP_FOWNER, and lets the write's through.
int may_clear_by_empty_setattr(fuse_req_t req, const struct stat &st, mode_t clear);
// Clears `bits` from the mode of `fd` (may be O_PATH); sets *changed if it did.
// Returns 0 or an errno.
int clear_setid_bits(int fd, mode_t bits, bool *changed = nullptr);
// Both, before a change of `nodeid` (open as `fd`) whose reply carries no attributes:
// the kernel's cached attributes are dropped when the mode changed. Returns 0 or errno.
int kill_privs(fuse_req_t req, uint64_t nodeid, int fd, SetidChange why, bool kernel_kill);

// The low-level operation table.
fuse_lowlevel_ops make_ops();

}  // namespace txnfs
