// Directory handles: opendir/readdir(plus)/releasedir/fsyncdir. Listings may be
// cached by the kernel (cache_readdir); it drops them when the directory changes.
// What an offset (d_off) means is the same for every handle of the directory, with or
// without open transactions: listings.h.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "store/backing.h"
#include "txnfuse/fuse/fs.h"
#include "txnfuse/fuse/op.h"

namespace txnfs {

namespace {

// A directory handle streams the tree's listing (XFS cookies as offsets) or serves a
// snapshot (listings.h: what every offset means, and why).
struct DirHandle {
  DIR *dp = nullptr;
  off_t offset = 0;                     // the stream's position (-1: unknown)
  dirent *entry = nullptr;              // read but not yet returned (did not fit)
  std::shared_ptr<const Listing> snap;  // the snapshot served last, if any
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
  UniqueFd opened = open_by_fh(fs_of(req).tree_fd, i->fh, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (!opened) return (void)fuse_reply_err(req, opened.err());
  int fd = opened.release();
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

int64_t ctime_ns(DIR *dp) {
  struct stat st;
  if (::fstat(::dirfd(dp), &st) != 0) return -1;
  return int64_t(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
}

// Which names of `l`, from entry k on, are in directory `dir` in the committed state now:
// the tree first, then what open transactions recorded (the order committed_view.h makes
// consistent).
std::vector<bool> committed_names(Fs &fs, uint64_t dir, DIR *dp, const Listing &l, size_t k) {
  std::vector<bool> found(l.entries.size());
  // One attempt for all the names: a transaction that ends between two of them would
  // otherwise show a reader the names of one batch on both sides of its commit.
  fs.view.until_quiet([&] {
    for (size_t j = k; j < l.entries.size(); j++) {
      const std::string &name = l.entries[j].name;
      if (is_dot_or_dotdot(name.c_str())) {
        found[j] = true;
        continue;
      }
      struct stat st;
      bool in_tree = ::fstatat(::dirfd(dp), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
      auto b = fs.view.before(dir, name);
      found[j] = b ? b->existed : in_tree;
    }
    return true;
  });
  return found;
}

// Entries [k, end) of `l`, as many as fit in `size`, each with the offset after it;
// when `keep` is not empty, only those it marks.
void reply_listing(fuse_req_t req, const Listing &l, size_t k, size_t size, bool plus,
                   const std::vector<bool> &keep) {
  std::vector<char> buf(size);
  char *p = buf.data();
  size_t rem = size;
  for (; k < l.entries.size(); k++) {
    const ListedEntry &s = l.entries[k];
    if (!keep.empty() && !keep[k]) continue;
    off_t next = off_t(l.offset_after(k));
    size_t n;
    if (plus) {  // no attributes: the kernel looks each entry up (plain lookups)
      fuse_entry_param e;
      std::memset(&e, 0, sizeof e);
      e.attr.st_ino = s.ino;
      e.attr.st_mode = s.type;
      n = fuse_add_direntry_plus(req, p, rem, s.name.c_str(), &e, next);
    } else {
      struct stat st;
      std::memset(&st, 0, sizeof st);
      st.st_ino = s.ino;
      st.st_mode = s.type;
      n = fuse_add_direntry(req, p, rem, s.name.c_str(), &st, next);
    }
    if (n > rem) break;
    p += n;
    rem -= n;
  }
  fuse_reply_buf(req, buf.data(), size - rem);
}

// Serves `l` from entry k on, and keeps it for the handle's next call. A plain reader
// is not given the names removed since the snapshot was taken: NFS-Ganesha looks each
// name up and fails the whole READDIR with NFS4ERR_NOENT on one that is gone. (Each name
// still comes once, and every name present throughout comes.) A snapshot that was the
// tree's listing is the committed listing for as long as the tree directory's ctime
// stays; any other may differ from it as soon as a transaction ends.
void serve(Op &op, fuse_req_t req, uint64_t nodeid, DirHandle &d, std::shared_ptr<const Listing> l,
           size_t k, size_t size, bool plus) {
  d.snap = std::move(l);
  d.offset = -1;  // reading a snapshot moved the stream
  d.entry = nullptr;
  std::vector<bool> keep;
  if (!op.txn() && (!d.snap->by_cookie || ctime_ns(d.dp) != d.snap->ctime_ns))
    keep = committed_names(op.fs(), nodeid, d.dp, *d.snap, k);
  reply_listing(req, *d.snap, k, size, plus, keep);
}

// A plain listing from the start while transactions are open: a snapshot of the
// committed listing, kept so that its offsets mean the same to a later opener.
void start_snapshot(Op &op, fuse_req_t req, uint64_t nodeid, DirHandle &d, size_t size, bool plus) {
  Fs &fs = op.fs();
  Listing l;
  l.ctime_ns = ctime_ns(d.dp);
  CommittedListing c = fs.view.listing(nodeid, d.dp);
  l.dir = nodeid;
  l.by_cookie = !c.changed;
  l.entries = std::move(c.entries);
  serve(op, req, nodeid, d, fs.listings.add(std::move(l)), 0, size, plus);
}

void stream(Op &op, fuse_req_t req, uint64_t nodeid, const InodePtr &dir, DirHandle &d, size_t size,
            off_t offset, bool plus);

// A continuation at `off`, a snapshot's offset (listings.h).
void from_snapshot(Op &op, fuse_req_t req, uint64_t nodeid, const InodePtr &dir, DirHandle &d,
                   size_t size, uint64_t off, bool plus) {
  Fs &fs = op.fs();
  const uint32_t id = dir_offset::id_of(off);
  auto l =
      d.snap && d.snap->id == id && d.snap->dir == nodeid ? d.snap : fs.listings.find(id, nodeid);
  const uint64_t view = op.txn() ? op.txn()->id() : 0;
  // A snapshot that carries cookies was the tree's listing: once it is gone, or for a
  // transaction (which sees the tree), the tree's own listing goes on at the cookie.
  if (!dir_offset::by_position(off) && (!l || l->view != view))
    return stream(op, req, nodeid, dir, d, size, off_t(dir_offset::low(off)), plus);
  size_t k = l ? l->position(off) : Listing::npos;
  if (k == Listing::npos) {
    spdlog::info("readdir of {}: offset {:#x} names no snapshot kept (EINVAL)", nodeid, off);
    return (void)fuse_reply_err(req, EINVAL);
  }
  // Another view's snapshot (a transaction's, or the committed one seen by a
  // transaction) goes on with the names of this reader's view it did not give yet.
  if (l->view != view) {
    auto now = op.txn() ? CommittedView::tree_listing(d.dp)  // under S: its own view
                        : fs.view.listing(nodeid, d.dp).entries;
    l = fs.listings.add(l->rebased(k, now, view));
  }
  serve(op, req, nodeid, d, std::move(l), k, size, plus);
}

void do_readdir(fuse_req_t req, fuse_ino_t nodeid, size_t size, off_t offset, fuse_file_info *fi,
                bool plus) {
  Op op(req);
  InodePtr dir = inode_of(req, nodeid);
  DirHandle *d = dir_of(fi);
  // A transaction lists under S on the directory, whatever the offset.
  int err = op.error() ? op.error() : !dir ? ESTALE : 0;
  if (!err && op.txn()) err = op.lock_object(nodeid, LockMode::S);
  if (err) return (void)fuse_reply_err(req, err);
  const uint64_t off = uint64_t(offset);
  if (dir_offset::is_snapshot(off)) return from_snapshot(op, req, nodeid, dir, *d, size, off, plus);
  if (off > dir_offset::kXfsMax) return (void)fuse_reply_err(req, EINVAL);  // no one's offset
  if (off == 0 && op.plain_isolated()) return start_snapshot(op, req, nodeid, *d, size, plus);
  // The tree's listing: a transaction's, a plain one while none is open, and one that
  // goes on at an XFS cookie (it streams the directory as it is: docs/isolation.md).
  stream(op, req, nodeid, dir, *d, size, offset, plus);
}

void stream(Op &op, fuse_req_t req, uint64_t nodeid, const InodePtr &dir, DirHandle &d, size_t size,
            off_t offset, bool plus) {
  Fs &fs = op.fs();
  d.snap.reset();
  std::vector<char> buf(size);
  char *p = buf.data();
  size_t rem = size;
  int err = 0;
  if (offset != d.offset) {
    ::seekdir(d.dp, offset);
    d.entry = nullptr;
    d.offset = offset;
  }
  const bool shared = op.shared_name(nodeid);  // (the same for every entry)
  // A plain reader's READDIRPLUS while transactions are open gives no attributes (the
  // kernel looks each name up, and is served the committed state): the tree may hold a
  // name an open transaction made, which must not reach the kernel's dentry cache.
  const bool lookups = plus && !op.plain_isolated();
  while (true) {
    if (!d.entry) {
      errno = 0;
      d.entry = ::readdir(d.dp);
      if (!d.entry) {
        err = errno;
        break;
      }
    }
    const char *name = d.entry->d_name;
    off_t next = d.entry->d_off;
    size_t n;
    if (lookups && !is_dot_or_dotdot(name)) {
      fuse_entry_param e;
      int lerr;
      try {
        lerr = do_lookup(fs, dir, name, &e);
      } catch (const std::exception &ex) {
        // The second place an exception stops (src/store/error.h): the entries already
        // looked up count in the kernel only if this reply carries them.
        spdlog::error("readdirplus {} in {}: {}", name, nodeid, ex.what());
        lerr = EIO;
      }
      if (lerr == ENOENT) {  // removed since readdir saw it
        d.entry = nullptr;
        d.offset = next;
        continue;
      }
      if (lerr) {
        err = lerr;
        break;
      }
      finish_entry(op, e, shared && fs.view.before(nodeid, name));
      fuse_entry_param k = e;
      k.ino = Views::kernel_nodeid(e.ino);
      n = fuse_add_direntry_plus(req, p, rem, name, &k, next);
      if (n > rem) {
        fs.forget(e.ino, 1);
        break;
      }
      fs.views.looked_up(Views::current());
    } else if (plus) {
      fuse_entry_param e;
      std::memset(&e, 0, sizeof e);
      e.attr.st_ino = d.entry->d_ino;
      e.attr.st_mode = mode_t(d.entry->d_type) << 12;
      n = fuse_add_direntry_plus(req, p, rem, name, &e, next);
      if (n > rem) break;
    } else {
      struct stat st;
      std::memset(&st, 0, sizeof st);
      st.st_ino = d.entry->d_ino;
      st.st_mode = mode_t(d.entry->d_type) << 12;
      n = fuse_add_direntry(req, p, rem, name, &st, next);
      if (n > rem) break;
    }
    p += n;
    rem -= n;
    d.entry = nullptr;
    d.offset = next;
  }
  // An error after some entries is reported on the next call, as getdents does.
  if (err && rem == size) return (void)fuse_reply_err(req, err);
  fuse_reply_buf(req, buf.data(), size - rem);
}

void op_readdir(fuse_req_t req, fuse_ino_t nodeid, size_t size, off_t off, fuse_file_info *fi) {
  do_readdir(req, nodeid, size, off, fi, false);
}

void op_readdirplus(fuse_req_t req, fuse_ino_t nodeid, size_t size, off_t off, fuse_file_info *fi) {
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
