#include "recovery/undo/undo_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "store/error.h"

namespace txnfs::undo_io {

uint64_t clone_block(int fd) {
  struct statfs sf;
  if (::fstatfs(fd, &sf) == 0 && sf.f_bsize > 0 && (sf.f_bsize & (sf.f_bsize - 1)) == 0)
    return uint64_t(sf.f_bsize);
  return 4096;
}

int clone_range(int src, int dst, uint64_t off, uint64_t len) {
  // src_length 0 would mean "to EOF": never ask for it.
  if (len == 0) return 0;
  file_clone_range r{};
  r.src_fd = src;
  r.src_offset = off;
  r.src_length = len;
  r.dest_offset = off;
  return ::ioctl(dst, FICLONERANGE, &r) == 0 ? 0 : errno;
}

int copy_range(int src, int dst, uint64_t off, uint64_t len) {
  std::vector<char> buf(std::min<uint64_t>(len, 1 << 20));
  while (len > 0) {
    ssize_t n = ::pread(src, buf.data(), std::min<uint64_t>(len, buf.size()), off_t(off));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;  // src shorter than the range it must hold
    for (ssize_t done = 0; done < n;) {
      ssize_t w = ::pwrite(dst, buf.data() + done, size_t(n - done), off_t(off) + done);
      if (w < 0) {
        if (errno == EINTR) continue;
        return errno;
      }
      done += w;
    }
    off += uint64_t(n);
    len -= uint64_t(n);
  }
  return 0;
}

int put_range(int src, int dst, uint64_t off, uint64_t len, bool clone) {
  if (clone) {
    uint64_t bs = clone_block(dst);
    uint64_t head = (off % bs == 0) ? len / bs * bs : 0;
    if (head > 0) {
      int e = clone_range(src, dst, off, head);
      // EOPNOTSUPP/EXDEV/ENOTTY: no reflink here; EINVAL: a layout the kernel will not
      // remap. Copying is always correct, only slower.
      if (e == EOPNOTSUPP || e == EXDEV || e == ENOTTY || e == EINVAL) head = 0;
      else if (e != 0) return e;
    }
    off += head;
    len -= head;
  }
  return copy_range(src, dst, off, len);
}

int read_xattrs(const std::string &path, Xattrs &out) {
  out.clear();
  std::vector<char> names;
  for (;;) {
    ssize_t n = ::listxattr(path.c_str(), nullptr, 0);
    if (n < 0) return errno == ENOTSUP ? 0 : errno;
    names.resize(size_t(n));
    n = n ? ::listxattr(path.c_str(), names.data(), names.size()) : 0;
    if (n < 0 && errno == ERANGE) continue;  // grew meanwhile
    if (n < 0) return errno;
    names.resize(size_t(n));
    break;
  }
  for (size_t i = 0; i < names.size();) {
    std::string name(names.data() + i);
    i += name.size() + 1;
    if (name.empty()) continue;
    std::string value;
    for (;;) {
      ssize_t n = ::getxattr(path.c_str(), name.c_str(), nullptr, 0);
      if (n < 0 && errno == ENODATA) break;  // removed meanwhile
      if (n < 0) return errno;
      value.resize(size_t(n));
      n = n ? ::getxattr(path.c_str(), name.c_str(), value.data(), value.size()) : 0;
      if (n < 0 && errno == ERANGE) continue;
      if (n < 0 && errno == ENODATA) break;
      if (n < 0) return errno;
      value.resize(size_t(n));
      out[name] = std::move(value);
      break;
    }
  }
  return 0;
}

std::vector<DirEntry> list_dir(int dirfd) {
  int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd >= 0 ? ::fdopendir(fd) : nullptr;
  if (!d) {
    int e = errno;
    if (fd >= 0) ::close(fd);
    throw_errno("read directory", e);
  }
  std::vector<DirEntry> out;
  errno = 0;
  while (dirent *e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") out.push_back({std::string(n), e->d_type});
    errno = 0;
  }
  int e = errno;
  ::closedir(d);
  if (e != 0) throw_errno("read directory", e);
  return out;
}

namespace {

void remove_below(int dirfd, dev_t dev, const std::string &path, const BelowHook &before) {
  std::vector<std::string> names;
  for (auto &e : list_dir(dirfd)) names.push_back(std::move(e.name));
  for (const auto &n : names) {
    struct stat st;
    if (::fstatat(dirfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      throw_errno("stat " + path + "/" + n, errno);
    }
    if (S_ISDIR(st.st_mode)) {
      if (st.st_dev != dev)
        throw Error("refusing to remove " + path + "/" + n +
                    ": another file system is mounted there");
      UniqueFd sub(::openat(dirfd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub) throw_errno("open " + path + "/" + n, sub.err());
      remove_below(sub.get(), dev, path + "/" + n, before);
    }
    if (before) before(dirfd, n, st);
    if (::unlinkat(dirfd, n.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) != 0 &&
        errno != ENOENT)
      throw_errno("remove " + path + "/" + n, errno);
  }
}

}  // namespace

void remove_tree(int dirfd, const std::string &name, const BelowHook &before) {
  struct stat st, parent;
  if (::fstat(dirfd, &parent) != 0) throw_errno("stat", errno);
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return;
    throw_errno("stat " + name, errno);
  }
  if (S_ISDIR(st.st_mode)) {
    if (st.st_dev != parent.st_dev)
      throw Error("refusing to remove " + name + ": another file system is mounted there");
    UniqueFd sub(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub) {
      if (sub.err() == ENOENT) return;
      throw_errno("open " + name, sub.err());
    }
    remove_below(sub.get(), parent.st_dev, name, before);
  }
  if (::unlinkat(dirfd, name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) != 0 &&
      errno != ENOENT)
    throw_errno("remove " + name, errno);
}

bool fatal_errno(int e) {
  return e == EIO || e == ENOSPC || e == EDQUOT || e == EROFS || e == ENOMEM ||
         e == EUCLEAN /* XFS: EFSCORRUPTED */ || e == EBADMSG /* XFS: EFSBADCRC */;
}

}  // namespace txnfs::undo_io
