// Directory handles: opendir/readdir(plus)/releasedir/fsyncdir. Listings may be
// cached by the kernel (cache_readdir); it drops them when the directory changes.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include <spdlog/spdlog.h>

#include "fs.h"

namespace txnfs {

namespace {

struct DirHandle {
  DIR *dp = nullptr;
  off_t offset = 0;
  dirent *entry = nullptr;  // read but not yet returned (did not fit)
  ~DirHandle() {
    if (dp) ::closedir(dp);
  }
};

DirHandle *dir_of(fuse_file_info *fi) { return reinterpret_cast<DirHandle *>(fi->fh); }

bool is_dot_or_dotdot(const char *n) {
  return n[0] == '.' && (n[1] == 0 || (n[1] == '.' && n[2] == 0));
}

void op_opendir(fuse_req_t req, fuse_ino_t nodeid, fuse_file_info *fi) {
  InodePtr i = inode_of(req, nodeid);
  if (!i) return (void)fuse_reply_err(req, ESTALE);
  int fd = ::openat(i->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return (void)fuse_reply_err(req, errno);
  auto d = std::make_unique<DirHandle>();
  d->dp = ::fdopendir(fd);
  if (!d->dp) {
    int err = errno;
    ::close(fd);
    return (void)fuse_reply_err(req, err);
  }
  fi->fh = reinterpret_cast<uint64_t>(d.release());
  fi->cache_readdir = 1;
  fi->keep_cache = 1;
  fuse_reply_open(req, fi);
}

void do_readdir(fuse_req_t req, fuse_ino_t nodeid, size_t size, off_t offset,
                fuse_file_info *fi, bool plus) {
  Fs &fs = fs_of(req);
  InodePtr dir = inode_of(req, nodeid);
  DirHandle *d = dir_of(fi);
  if (!dir) return (void)fuse_reply_err(req, ESTALE);
  std::vector<char> buf(size);
  char *p = buf.data();
  size_t rem = size;
  int err = 0;
  if (offset != d->offset) {
    ::seekdir(d->dp, offset);
    d->entry = nullptr;
    d->offset = offset;
  }
  while (true) {
    if (!d->entry) {
      errno = 0;
      d->entry = ::readdir(d->dp);
      if (!d->entry) {
        err = errno;
        break;
      }
    }
    const char *name = d->entry->d_name;
    off_t next = d->entry->d_off;
    size_t n;
    if (plus && !is_dot_or_dotdot(name)) {
      fuse_entry_param e;
      int lerr;
      try {
        lerr = do_lookup(fs, dir, name, &e);
      } catch (const std::exception &ex) {
        spdlog::error("readdirplus {} in {}: {}", name, nodeid, ex.what());
        lerr = EIO;
      }
      if (lerr == ENOENT) {  // removed since readdir saw it
        d->entry = nullptr;
        d->offset = next;
        continue;
      }
      if (lerr) {
        err = lerr;
        break;
      }
      n = fuse_add_direntry_plus(req, p, rem, name, &e, next);
      if (n > rem) {
        fs.inodes.forget(e.ino, 1);
        break;
      }
    } else if (plus) {
      fuse_entry_param e;
      std::memset(&e, 0, sizeof e);
      e.attr.st_ino = d->entry->d_ino;
      e.attr.st_mode = mode_t(d->entry->d_type) << 12;
      n = fuse_add_direntry_plus(req, p, rem, name, &e, next);
      if (n > rem) break;
    } else {
      struct stat st;
      std::memset(&st, 0, sizeof st);
      st.st_ino = d->entry->d_ino;
      st.st_mode = mode_t(d->entry->d_type) << 12;
      n = fuse_add_direntry(req, p, rem, name, &st, next);
      if (n > rem) break;
    }
    p += n;
    rem -= n;
    d->entry = nullptr;
    d->offset = next;
  }
  // An error after some entries is reported on the next call, as getdents does.
  if (err && rem == size) return (void)fuse_reply_err(req, err);
  fuse_reply_buf(req, buf.data(), size - rem);
}

void op_readdir(fuse_req_t req, fuse_ino_t nodeid, size_t size, off_t off, fuse_file_info *fi) {
  do_readdir(req, nodeid, size, off, fi, false);
}

void op_readdirplus(fuse_req_t req, fuse_ino_t nodeid, size_t size, off_t off,
                    fuse_file_info *fi) {
  do_readdir(req, nodeid, size, off, fi, true);
}

void op_releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info *fi) {
  delete dir_of(fi);
  fuse_reply_err(req, 0);
}

void op_fsyncdir(fuse_req_t req, fuse_ino_t, int datasync, fuse_file_info *fi) {
  int fd = ::dirfd(dir_of(fi)->dp);
  int rc = datasync ? ::fdatasync(fd) : ::fsync(fd);
  fuse_reply_err(req, rc == 0 ? 0 : errno);
}

}  // namespace

void add_dir_ops(fuse_lowlevel_ops &ops) {
  ops.opendir = op_opendir;
  ops.readdir = op_readdir;
  ops.readdirplus = op_readdirplus;
  ops.releasedir = op_releasedir;
  ops.fsyncdir = op_fsyncdir;
}

}  // namespace txnfs
