// File data and per-object operations: open/read/write and friends, statfs, xattrs.
// Data moves by splice where the kernel allows it (fuse_buf_copy / fuse_reply_data).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "fs.h"

namespace txnfs {

namespace {

void op_open(fuse_req_t req, fuse_ino_t nodeid, fuse_file_info *fi) {
  InodePtr i = inode_of(req, nodeid);
  if (!i) return (void)fuse_reply_err(req, ESTALE);
  int flags = (fi->flags | O_CLOEXEC) & ~(O_NOFOLLOW | O_CREAT | O_EXCL | O_NOCTTY);
  int fd = ::open(proc_path(i->fd).c_str(), flags);
  if (fd < 0) return (void)fuse_reply_err(req, errno);
  fi->fh = uint64_t(fd);
  // Every write reaches the backing file through this daemon and the kernel's page
  // cache, so cached pages stay valid across opens; there is nothing to flush.
  fi->keep_cache = 1;
  fi->noflush = 1;
  if (fi->flags & O_DIRECT) fi->direct_io = 1;
  fuse_reply_open(req, fi);
}

void op_release(fuse_req_t req, fuse_ino_t, fuse_file_info *fi) {
  ::close(int(fi->fh));
  fuse_reply_err(req, 0);
}

void op_flush(fuse_req_t req, fuse_ino_t, fuse_file_info *) { fuse_reply_err(req, 0); }

void op_fsync(fuse_req_t req, fuse_ino_t, int datasync, fuse_file_info *fi) {
  int rc = datasync ? ::fdatasync(int(fi->fh)) : ::fsync(int(fi->fh));
  fuse_reply_err(req, rc == 0 ? 0 : errno);
}

void op_read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info *fi) {
  fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
  buf.buf[0].flags = fuse_buf_flags(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
  buf.buf[0].fd = int(fi->fh);
  buf.buf[0].pos = off;
  fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

void op_write_buf(fuse_req_t req, fuse_ino_t, fuse_bufvec *in, off_t off, fuse_file_info *fi) {
  fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in));
  out.buf[0].flags = fuse_buf_flags(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
  out.buf[0].fd = int(fi->fh);
  out.buf[0].pos = off;
  ssize_t n = fuse_buf_copy(&out, in, fuse_buf_copy_flags(0));
  if (n < 0) fuse_reply_err(req, int(-n));
  else fuse_reply_write(req, size_t(n));
}

void op_fallocate(fuse_req_t req, fuse_ino_t, int mode, off_t off, off_t len,
                  fuse_file_info *fi) {
  int rc = ::fallocate(int(fi->fh), mode, off, len);
  fuse_reply_err(req, rc == 0 ? 0 : errno);
}

void op_lseek(fuse_req_t req, fuse_ino_t, off_t off, int whence, fuse_file_info *fi) {
  off_t r = ::lseek(int(fi->fh), off, whence);
  if (r < 0) fuse_reply_err(req, errno);
  else fuse_reply_lseek(req, r);
}

void op_copy_file_range(fuse_req_t req, fuse_ino_t, off_t off_in, fuse_file_info *fi_in,
                        fuse_ino_t, off_t off_out, fuse_file_info *fi_out, size_t len,
                        int flags) {
  loff_t in = off_in, out = off_out;
  ssize_t n = ::copy_file_range(int(fi_in->fh), &in, int(fi_out->fh), &out, len, unsigned(flags));
  if (n < 0) fuse_reply_err(req, errno);
  else fuse_reply_write(req, size_t(n));
}

void op_statfs(fuse_req_t req, fuse_ino_t nodeid) {
  InodePtr i = inode_of(req, nodeid);
  struct statvfs sv;
  if (!i) return (void)fuse_reply_err(req, ESTALE);
  if (::fstatvfs(i->fd, &sv) != 0) return (void)fuse_reply_err(req, errno);
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

void op_getxattr(fuse_req_t req, fuse_ino_t nodeid, const char *name, size_t size) {
  InodePtr i = inode_of(req, nodeid);
  if (!i) return (void)fuse_reply_err(req, ESTALE);
  std::vector<char> buf(size);
  ssize_t n = ::getxattr(proc_path(i->fd).c_str(), name, size ? buf.data() : nullptr, size);
  reply_xattr_result(req, size, n, buf);
}

void op_listxattr(fuse_req_t req, fuse_ino_t nodeid, size_t size) {
  InodePtr i = inode_of(req, nodeid);
  if (!i) return (void)fuse_reply_err(req, ESTALE);
  std::vector<char> buf(size);
  ssize_t n = ::listxattr(proc_path(i->fd).c_str(), size ? buf.data() : nullptr, size);
  reply_xattr_result(req, size, n, buf);
}

void op_setxattr(fuse_req_t req, fuse_ino_t nodeid, const char *name, const char *value,
                 size_t size, int flags) {
  InodePtr i = inode_of(req, nodeid);
  if (!i) return (void)fuse_reply_err(req, ESTALE);
  int rc = ::setxattr(proc_path(i->fd).c_str(), name, value, size, flags);
  fuse_reply_err(req, rc == 0 ? 0 : errno);
}

void op_removexattr(fuse_req_t req, fuse_ino_t nodeid, const char *name) {
  InodePtr i = inode_of(req, nodeid);
  if (!i) return (void)fuse_reply_err(req, ESTALE);
  int rc = ::removexattr(proc_path(i->fd).c_str(), name);
  fuse_reply_err(req, rc == 0 ? 0 : errno);
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
