// File data and per-object operations: open/read/write and friends, statfs, xattrs.
// Data moves by splice where the kernel allows it (fuse_buf_copy / fuse_reply_data).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "store/backing.h"
#include "txnfuse/fuse/fs.h"
#include "txnfuse/fuse/op.h"
#include "txnfuse/txn/recorder.h"

namespace txnfs {

namespace {

void op_open(fuse_req_t req, fuse_ino_t nodeid, fuse_file_info *fi) {
  Op op(req);
  auto [i, err] = op.on(nodeid);
  if (!err && (fi->flags & O_TRUNC)) {
    err = op.lock_object(nodeid, LockMode::X);
    if (!err && op.txn()) err = save_truncate(op.fs(), *op.txn(), *i, 0);
  }
  if (err) return (void)fuse_reply_err(req, err);
  // Opened by handle: no O_PATH fd needs pinning for it.
  UniqueFd opened = open_by_fh(op.fs().tree_fd, i->fh, backing_open_flags(fi->flags));
  if (!opened) return (void)fuse_reply_err(req, opened.err());
  int fd = opened.release();
  if ((fi->flags & O_TRUNC))
    if (int e = kill_privs(req, nodeid, fd, SetidChange::kData, fi->kill_suidgid)) {
      ::close(fd);
      return (void)fuse_reply_err(req, e);
    }
  // Every plain write reaches the backing file through this daemon and the kernel's
  // page cache, so cached pages stay valid across opens; there is nothing to flush.
  // A transaction's I/O bypasses the page cache: its reads must take locks here, and
  // its writes must not be seen by others before it commits.
  // A plain open while transactions are open bypasses the page cache too: a
  // transaction's writes move the kernel's file size, which would clip cached reads.
  if (op.cacheable() && direct_writer(fi->flags)) i->txn_written = true;
  fi->keep_cache = op.cacheable() && !op.plain_isolated() && !i->txn_written;
  fi->noflush = 1;
  fi->direct_io = !fi->keep_cache || (fi->flags & O_DIRECT);
  op.set_fh(fi, fd, i);
  op.passthrough(fi, *i);
  fuse_reply_open(req, fi);
}

void op_release(fuse_req_t req, fuse_ino_t nodeid, fuse_file_info *fi) {
  Fs &fs = fs_of(req);
  if (fi->fh & kTxnWriterFh) fs.txns->closed(fd_of(fi));  // before the fd is reused
  ::close(fd_of(fi));
  if (fi->fh & kPassthroughFh) fs.views.passthrough_release(req, Views::current(), nodeid);
  fuse_reply_err(req, 0);
}

void op_flush(fuse_req_t req, fuse_ino_t, fuse_file_info *) { fuse_reply_err(req, 0); }

void op_fsync(fuse_req_t req, fuse_ino_t nodeid, int datasync, fuse_file_info *fi) {
  if (!inode_of(req, nodeid)) return (void)fuse_reply_err(req, ESTALE);
  if (fs_of(req).txns->defers_fsync(fuse_req_ctx(req)->pid)) return (void)fuse_reply_err(req, 0);
  // A plain fsync asks for durability: lazy commits become durable too.
  if (int err = fs_of(req).txns->before_plain_change()) return (void)fuse_reply_err(req, err);
  int rc = datasync ? ::fdatasync(fd_of(fi)) : ::fsync(fd_of(fi));
  fuse_reply_err(req, rc == 0 ? 0 : errno);
}

// A plain read while transactions are open: the committed bytes, without waiting.
void read_committed(fuse_req_t req, Fs &fs, fuse_ino_t nodeid, size_t size, off_t off,
                    fuse_file_info *fi) {
  std::vector<char> buf(size);
  size_t n = 0;
  if (int err = fs.view.read(nodeid, fd_of(fi), buf.data(), size, off, &n))
    return (void)fuse_reply_err(req, err);
  fuse_reply_buf(req, buf.data(), n);
}

void op_read(fuse_req_t req, fuse_ino_t nodeid, size_t size, off_t off, fuse_file_info *fi) {
  Op op(req);
  auto [i, err] = op.on(nodeid);
  // Whole pages: possibly a page fault of a mapping (see Inode::paged).
  if (!err && (off | off_t(size)) % 4096 == 0 && !i->paged.load(std::memory_order_relaxed))
    i->paged.store(true, std::memory_order_relaxed);
  if (!err && op.plain_isolated()) return read_committed(req, op.fs(), nodeid, size, off, fi);
  if (!err) err = op.lock_object(nodeid, LockMode::S);
  if (!err && i->gone) err = ESTALE;
  if (err) return (void)fuse_reply_err(req, err);
  fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
  buf.buf[0].flags = fuse_buf_flags(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
  buf.buf[0].fd = fd_of(fi);
  buf.buf[0].pos = off;
  fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

void op_write_buf(fuse_req_t req, fuse_ino_t nodeid, fuse_bufvec *in, off_t off,
                  fuse_file_info *fi) {
  Op op(req, fi);
  auto [i, err] = op.on(nodeid, LockMode::X);
  if (!err && op.txn()) err = save_range(op.fs(), *op.txn(), *i, off, fuse_buf_size(in));
  // (Not for the kernel's writeback of a shared mapping: a store through a mapping
  // clears no bits on XFS either.)
  if (!err && !fi->writepage)
    err = kill_privs(req, nodeid, fd_of(fi), SetidChange::kData, fi->kill_suidgid);
  if (err) return (void)fuse_reply_err(req, err);
  fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in));
  out.buf[0].flags = fuse_buf_flags(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
  out.buf[0].fd = fd_of(fi);
  out.buf[0].pos = off;
  ssize_t n = fuse_buf_copy(&out, in, fuse_buf_copy_flags(0));
  if (n < 0) fuse_reply_err(req, int(-n));
  else fuse_reply_write(req, size_t(n));
}

void op_fallocate(fuse_req_t req, fuse_ino_t nodeid, int mode, off_t off, off_t len,
                  fuse_file_info *fi) {
  Op op(req);
  auto [i, err] = op.on(nodeid, LockMode::X);
  if (!err && op.txn()) {
    Txn &t = *op.txn();
    if (mode & (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE))
      err = save_truncate(op.fs(), t, *i, off);  // everything from off on moves
    else if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE))
      err = save_range(op.fs(), t, *i, off, len);
    else err = save_attrs(op.fs(), t, *i);
  }
  if (!err) err = kill_privs(req, nodeid, fd_of(fi), SetidChange::kData, false);
  if (err) return (void)fuse_reply_err(req, err);
  int rc = ::fallocate(fd_of(fi), mode, off, len);
  fuse_reply_err(req, rc == 0 ? 0 : errno);
}

void op_lseek(fuse_req_t req, fuse_ino_t nodeid, off_t off, int whence, fuse_file_info *fi) {
  Op op(req);
  auto [i, err] = op.on(nodeid);
  if (!err && !op.plain_isolated()) err = op.lock_object(nodeid, LockMode::S);
  if (err) return (void)fuse_reply_err(req, err);
  off_t r = ::lseek(fd_of(fi), off, whence);
  if (r < 0) fuse_reply_err(req, errno);
  else fuse_reply_lseek(req, r);
}

void op_copy_file_range(fuse_req_t req, fuse_ino_t in_node, off_t off_in, fuse_file_info *fi_in,
                        fuse_ino_t out_node, off_t off_out, fuse_file_info *fi_out, size_t len,
                        int flags) {
  Op op(req);
  InodePtr in_i = inode_of(req, in_node), out_i = inode_of(req, out_node);
  int err = op.error()        ? op.error()
            : !in_i || !out_i ? ESTALE
                              : op.lock_object(in_node, LockMode::S);
  if (!err) err = op.lock_object(out_node, LockMode::X);
  if (!err && op.txn()) err = save_range(op.fs(), *op.txn(), *out_i, off_out, len);
  if (!err) err = kill_privs(req, out_node, fd_of(fi_out), SetidChange::kData, false);
  if (err) return (void)fuse_reply_err(req, err);
  // One call, answered as XFS answered it: copy_file_range(2) may copy less than asked
  // (XFS clones the block-aligned part of a range and returns that), and the caller
  // goes on from there, as on XFS. EINTR copied nothing and is not the caller's: a
  // signal meant for this daemon thread (none of the caller's) interrupted it.
  loff_t in = off_in, out = off_out;
  ssize_t n;
  do {
    n = ::copy_file_range(fd_of(fi_in), &in, fd_of(fi_out), &out, len, unsigned(flags));
  } while (n < 0 && errno == EINTR);
  if (n < 0) fuse_reply_err(req, errno);
  else fuse_reply_write(req, size_t(n));
}

void op_statfs(fuse_req_t req, fuse_ino_t nodeid) {
  InodePtr i = inode_of(req, nodeid);
  struct statvfs sv;
  if (!i) return (void)fuse_reply_err(req, ESTALE);
  // One file system: any fd of it answers for every object.
  if (::fstatvfs(fs_of(req).tree_fd, &sv) != 0) return (void)fuse_reply_err(req, errno);
  fuse_reply_statfs(req, &sv);
}

// xattr calls reach the object through /proc/self/fd/N: the O_PATH fd cannot be
// used with f*xattr, and the magic link resolves to the object itself (also for
// symlinks), never to what it points at.
void reply_xattr_result(fuse_req_t req, size_t size, ssize_t n, const std::vector<char> &buf) {
  if (n < 0) return (void)fuse_reply_err(req, errno);
  if (size == 0) return (void)fuse_reply_xattr(req, size_t(n));
  fuse_reply_buf(req, buf.data(), size_t(n));
}

// getxattr/listxattr: `call(path, buf, size)` on the object -- for a plain request
// while transactions are open, its committed xattrs (txn/committed_view.h).
template <typename Call>
void read_xattrs(fuse_req_t req, fuse_ino_t nodeid, size_t size, Call call) {
  Op op(req);
  auto [i, err] = op.on(nodeid);
  if (!err && !op.plain_isolated()) err = op.lock_object(nodeid, LockMode::S);
  InodeFd fd = err ? InodeFd() : op.fs().pin(*i);
  if (!err && !fd) err = fd.err();
  if (err) return (void)fuse_reply_err(req, err);
  std::vector<char> buf(size);
  auto read = [&](int from) {
    return call(proc_path(from).c_str(), size ? buf.data() : nullptr, size);
  };
  ssize_t n =
      op.plain_isolated() ? op.fs().view.read_xattrs(i->nodeid, fd.get(), read) : read(fd.get());
  reply_xattr_result(req, size, n, buf);
}

void op_getxattr(fuse_req_t req, fuse_ino_t nodeid, const char *name, size_t size) {
  read_xattrs(req, nodeid, size, [name](const char *path, char *buf, size_t len) {
    return ::getxattr(path, name, buf, len);
  });
}

void op_listxattr(fuse_req_t req, fuse_ino_t nodeid, size_t size) {
  read_xattrs(req, nodeid, size,
              [](const char *path, char *buf, size_t len) { return ::listxattr(path, buf, len); });
}

void op_setxattr(fuse_req_t req, fuse_ino_t nodeid, const char *name, const char *value,
                 size_t size, int flags) {
  Op op(req);
  auto [i, err] = op.on(nodeid, LockMode::X);
  if (!err && op.txn()) err = save_xattrs(op.fs(), *op.txn(), *i);
  InodeFd fd = err ? InodeFd() : op.fs().pin(*i);
  if (!err && !fd) err = fd.err();
  // An access ACL set by a caller outside the file's group clears S_ISGID on XFS
  // (posix_acl_update_mode); XFS keeps it for the daemon. The kernel would say so only
  // through FUSE_SETXATTR_ACL_KILL_SGID, which libfuse does not pass on.
  struct stat st;
  mode_t clear = 0;
  if (!err && std::strcmp(name, "system.posix_acl_access") == 0) {
    if (::fstat(fd.get(), &st) != 0) err = errno;
    else clear = setid_bits_to_clear(req, st, SetidChange::kAcl);
  }
  if (err) return (void)fuse_reply_err(req, err);
  i->default_acl = Inode::kUnknown;  // before and after: a creation reading it meanwhile
  int rc = ::setxattr(proc_path(fd.get()).c_str(), name, value, size, flags);
  int e = rc == 0 ? 0 : errno;
  i->default_acl = Inode::kUnknown;  // caches what it found before the change only briefly
  // (After the set, which failed or made the mode: the kernel drops its cached
  // attributes after the reply.)
  if (!e) e = clear_setid_bits(fd.get(), clear);
  fuse_reply_err(req, e);
}

void op_removexattr(fuse_req_t req, fuse_ino_t nodeid, const char *name) {
  Op op(req);
  auto [i, err] = op.on(nodeid, LockMode::X);
  if (!err && op.txn()) err = save_xattrs(op.fs(), *op.txn(), *i);
  InodeFd fd = err ? InodeFd() : op.fs().pin(*i);
  if (!err && !fd) err = fd.err();
  if (err) return (void)fuse_reply_err(req, err);
  i->default_acl = Inode::kUnknown;  // (as op_setxattr)
  int rc = ::removexattr(proc_path(fd.get()).c_str(), name);
  int e = rc == 0 ? 0 : errno;
  i->default_acl = Inode::kUnknown;
  fuse_reply_err(req, e);
}

}  // namespace

void add_data_ops(fuse_lowlevel_ops &ops) {
  ops.open = op_open;
  ops.release = op_release;
  ops.flush = op_flush;
  ops.fsync = op_fsync;
  ops.read = op_read;
  ops.write_buf = op_write_buf;
  ops.fallocate = op_fallocate;
  ops.lseek = op_lseek;
  ops.copy_file_range = op_copy_file_range;
  ops.statfs = op_statfs;
  ops.getxattr = op_getxattr;
  ops.listxattr = op_listxattr;
  ops.setxattr = op_setxattr;
  ops.removexattr = op_removexattr;
}

}  // namespace txnfs
