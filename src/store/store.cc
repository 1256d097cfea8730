#include "store/store.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string_view>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "store/backing.h"
#include "store/error.h"
#include "store/metadb.h"
#include "store/unique_fd.h"

namespace txnfs {

StorePaths StorePaths::of(const std::string &store) {
  StorePaths p;
  p.root = store;
  while (p.root.size() > 1 && p.root.back() == '/') p.root.pop_back();
  p.tree = p.root + "/tree";
  p.internal = p.root + "/.txnfs";
  p.db = p.internal + "/meta.db";
  p.backups = p.internal + "/backups";
  p.lock = p.internal + "/lock";
  p.handle_journal = p.internal + "/handles.journal";
  p.handles_stale = p.internal + "/handles-stale";
  return p;
}

namespace {

void fsync_path(const std::string &path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd || ::fsync(fd.get()) != 0) throw_errno("fsync " + path, errno);
}

}  // namespace

void mark_handles_stale(const StorePaths &paths, const std::string &why) noexcept {
  try {
    std::string tmp = paths.handles_stale + ".tmp";
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd) throw_errno("create " + tmp, fd.err());
    std::string text = why + "\n";
    if (::write(fd.get(), text.data(), text.size()) != ssize_t(text.size()))
      throw_errno("write " + tmp, errno ? errno : EIO);
    if (::fsync(fd.get()) != 0) throw_errno("fsync " + tmp, errno);
    if (::rename(tmp.c_str(), paths.handles_stale.c_str()) != 0)
      throw_errno("rename " + tmp, errno);
    fsync_path(paths.internal);
  } catch (const std::exception &e) {
    spdlog::error("marking the handle table for reconciling ({}): {}", why, e.what());
  }
}

std::optional<std::string> handles_stale_reason(const StorePaths &paths) {
  UniqueFd fd(::open(paths.handles_stale.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (fd.err() == ENOENT) return std::nullopt;
    throw_errno("open " + paths.handles_stale, fd.err());
  }
  std::string text(4096, '\0');
  ssize_t n = ::read(fd.get(), text.data(), text.size());
  if (n < 0) throw_errno("read " + paths.handles_stale, errno);
  text.resize(size_t(n));
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

void clear_handles_stale(const StorePaths &paths) {
  if (::unlink(paths.handles_stale.c_str()) != 0) {
    if (errno == ENOENT) return;
    throw_errno("remove " + paths.handles_stale, errno);
  }
  fsync_path(paths.internal);
}

bool dir_is_empty(int dirfd, const char *name) {
  UniqueFd fd(::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  DIR *d = fd ? ::fdopendir(fd.get()) : nullptr;
  if (!d) return false;
  fd.release();  // closedir closes it
  bool empty = true;
  while (dirent *e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  return empty;
}

bool supports_reflink(const std::string &dir) {
  UniqueFd src(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  UniqueFd dst(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!src || !dst) return false;
  char block[4096] = {1};
  if (::pwrite(src.get(), block, sizeof block, 0) != ssize_t(sizeof block)) return false;
  file_clone_range r{};
  r.src_fd = src.get();
  r.src_offset = 0;
  r.src_length = sizeof block;
  r.dest_offset = 0;
  return ::ioctl(dst.get(), FICLONERANGE, &r) == 0;
}

void check_store_layout(const StorePaths &p) {
  struct stat st;
  if (::stat(p.root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error(fmt::format("store {} does not exist or is not a directory", p.root),
                "create one with: txnfs init STORE");
  if (::stat(p.internal.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error(fmt::format("{} is not a txnfs store: {} is missing", p.root, p.internal),
                "create a store with: txnfs init STORE");
  if (::stat(p.tree.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error(fmt::format("store {} is damaged: its tree {} is missing", p.root, p.tree));
  if (::stat(p.backups.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error(fmt::format("store {} is damaged: {} is missing", p.root, p.backups),
                "txnfs fsck STORE --repair recreates it");
}

void init_store(const std::string &store, bool allow_copy_backups) {
  namespace fsys = std::filesystem;
  StorePaths p = StorePaths::of(store);
  struct stat st;
  bool created_root = false;
  if (::stat(p.root.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) throw Error(fmt::format("{} exists and is not a directory", p.root));
    if (::stat(p.internal.c_str(), &st) == 0)
      throw Error(fmt::format("{} is already a txnfs store", p.root));
    if (!dir_is_empty(AT_FDCWD, p.root.c_str()))
      throw Error(fmt::format("{} is not empty", p.root),
                  "txnfs init needs a missing or empty directory");
  } else {
    if (::mkdir(p.root.c_str(), 0700) != 0)
      throw_errno(fmt::format("cannot create store directory {}", p.root), errno);
    created_root = true;
  }

  bool reflink = supports_reflink(p.root);
  if (!reflink && !allow_copy_backups) {
    if (created_root) ::rmdir(p.root.c_str());
    throw Error(fmt::format("the file system of {} cannot clone file ranges (no reflink)", p.root),
                "use XFS made with `mkfs.xfs -m reflink=1`, or pass --allow-copy-backups "
                "to back data up by copying (slower)");
  }

  try {
    // The store is root's: through STORE/tree anyone could change files behind txnfs's
    // back (no locks, no undo, no handle rows). The mount is the way in.
    if (::chmod(p.root.c_str(), 0700) != 0) throw_errno("chmod " + p.root, errno);
    if (::mkdir(p.internal.c_str(), 0700) != 0) throw_errno("mkdir " + p.internal, errno);
    if (::mkdir(p.backups.c_str(), 0700) != 0) throw_errno("mkdir " + p.backups, errno);
    if (::mkdir(p.tree.c_str(), 0755) != 0) throw_errno("mkdir " + p.tree, errno);
    UniqueFd lock(::open(p.lock.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
    if (!lock) throw_errno("create " + p.lock, errno);

    auto db = MetaDb::create(p.db);
    db->set_meta("backups", reflink ? "reflink" : "copy");
    UniqueFd tree(::open(p.tree.c_str(), O_PATH | O_CLOEXEC));
    if (!tree) throw_errno("open " + p.tree, errno);
    BackingId id = backing_id(tree.get());
    HandleRow root;
    root.nodeid = 1;  // FUSE_ROOT_ID
    root.generation = id.generation;
    root.ino = id.ino;
    root.fh = id.fh;
    root.type = S_IFDIR;
    db->put_handle(root);
    db->sync();
    fsync_path(p.internal);
    fsync_path(p.root);
  } catch (...) {
    std::error_code ec;
    fsys::remove_all(p.internal, ec);
    fsys::remove_all(p.tree, ec);
    if (created_root) ::rmdir(p.root.c_str());
    throw;
  }
}

StoreLock::StoreLock(const StorePaths &paths) {
  fd_.reset(::open(paths.lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd_) throw_errno("open " + paths.lock, errno);
  if (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    fd_.reset();
    if (err == EWOULDBLOCK)
      throw Error(fmt::format("store {} is already mounted (another txnfs daemon holds {})",
                              paths.root, paths.lock),
                  "unmount it first, or use that mount");
    throw_errno("flock " + paths.lock, err);
  }
}

}  // namespace txnfs
