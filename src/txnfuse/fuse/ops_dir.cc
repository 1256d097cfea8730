// Directory handles: opendir/readdir(plus)/releasedir/fsyncdir. Listings may be
// cached by the kernel (cache_readdir); it drops them when the directory changes.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "store/backing.h"
#include "txnfuse/fuse/fs.h"
#include "txnfuse/fuse/op.h"

namespace txnfs {

namespace {

struct DirHandle {
  DIR *dp = nullptr;
  off_t offset = 0;
  dirent *entry = nullptr;  // read but not yet returned (did not fit)
  // A plain listing while transactions are open: the committed listing, built at
  // offset 0 and served by index (offset k = after entry k-1).
  bool snapshot = false;
  std::vector<ListedEntry> snap;
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
  int fd = open_by_fh(fs_of(req).tree_fd, i->fh, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return (void)fuse_reply_err(req, -fd);
  auto d = std::make_unique<DirHandle>();
  d->dp = ::fdopendir(fd);
  if (!d->dp) {
    int err = errno;
    ::close(fd);
    return (void)fuse_reply_err(req, err);
  }
  fi->fh = reinterpret_cast<uint64_t>(d.release());
  Op op(req);  // only to learn whether the listing may be cached
  TxnManager &tm = *op.fs().txns;
  bool cache = op.cacheable() && !tm.any_open();
  if (cache) {
    // Marked before asking again whether a transaction is open (a fence between the
    // two): a transaction that began after that question finds the mark set when it
    // commits (commit_here). Rarely one begins between the two questions: marked, not
    // cached.
    i->listing_cached.store(true);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    cache = !tm.any_open();
  }
  fi->cache_readdir = cache;
  fi->keep_cache = fi->cache_readdir;
  fuse_reply_open(req, fi);
}

// The committed listing of `dir` (txn/committed_view.h), served by index from here on.
void build_snapshot(Fs &fs, uint64_t nodeid, DirHandle &d) {
  d.snap = fs.view.listing(nodeid, d.dp);
  d.snapshot = true;
  d.offset = -1;  // the stream position is lost
}

void reply_snapshot(fuse_req_t req, DirHandle &d, size_t size, off_t offset, bool plus) {
  std::vector<char> buf(size);
  char *p = buf.data();
  size_t rem = size;
  for (size_t k = size_t(std::max<off_t>(offset, 0)); k < d.snap.size(); k++) {
    const ListedEntry &s = d.snap[k];
    size_t n;
    if (plus) {  // no attributes: the kernel looks each entry up (plain lookups)
      fuse_entry_param e;
      std::memset(&e, 0, sizeof e);
      e.attr.st_ino = s.ino;
      e.attr.st_mode = s.type;
      n = fuse_add_direntry_plus(req, p, rem, s.name.c_str(), &e, off_t(k + 1));
    } else {
      struct stat st;
      std::memset(&st, 0, sizeof st);
      st.st_ino = s.ino;
      st.st_mode = s.type;
      n = fuse_add_direntry(req, p, rem, s.name.c_str(), &st, off_t(k + 1));
    }
    if (n > rem) break;
    p += n;
    rem -= n;
  }
  fuse_reply_buf(req, buf.data(), size - rem);
}

void do_readdir(fuse_req_t req, fuse_ino_t nodeid, size_t size, off_t offset,
                fuse_file_info *fi, bool plus) {
  Op op(req);
  Fs &fs = op.fs();
  InodePtr dir = inode_of(req, nodeid);
  DirHandle *d = dir_of(fi);
  // Once a listing is a snapshot its offsets are indices: it stays one to the end,
  // even if the transactions end meanwhile.
  if (d->snapshot || (op.plain_isolated() && offset == 0)) {
    if (offset == 0) build_snapshot(fs, nodeid, *d);
    return reply_snapshot(req, *d, size, offset, plus);
  }
  // A transaction lists under S on the directory. (A plain listing that was already
  // streaming when a transaction began goes on streaming: see docs/isolation.md.)
  int lerr0 = op.error() ? op.error() : !dir ? ESTALE : 0;
  if (!lerr0 && op.txn()) lerr0 = op.lock_object(nodeid, LockMode::S);
  if (lerr0) return (void)fuse_reply_err(req, lerr0);
  std::vector<char> buf(size);
  char *p = buf.data();
  size_t rem = size;
  int err = 0;
  if (offset != d->offset) {
    ::seekdir(d->dp, offset);
    d->entry = nullptr;
    d->offset = offset;
  }
  const bool shared = op.shared_name(nodeid);  // (the same for every entry)
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
      finish_entry(op, e, shared && fs.view.before(nodeid, name));
      n = fuse_add_direntry_plus(req, p, rem, name, &e, next);
      if (n > rem) {
        fs.forget(e.ino, 1);
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
  if (fs_of(req).txns->defers_fsync(fuse_req_ctx(req)->pid)) return (void)fuse_reply_err(req, 0);
  // A plain fsync asks for durability: lazy commits become durable too.
  if (int err = fs_of(req).txns->before_plain_change()) return (void)fuse_reply_err(req, err);
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
