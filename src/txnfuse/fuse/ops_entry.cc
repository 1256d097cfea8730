// Namespace operations: lookup/forget, attributes, and everything that creates,
// links, removes or renames a directory entry. Each keeps the handle table in step
// with the tree: a new object gets a row, a removed one loses it, a rename moves it.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string_view>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "store/backing.h"
#include "store/error.h"
#include "store/store.h"
#include "sync/stall_watchdog.h"
#include "txnfuse/fuse/fs.h"
#include "txnfuse/fuse/op.h"
#include "txnfuse/txn/recorder.h"

namespace txnfs {

InodePtr inode_of(fuse_req_t req, fuse_ino_t nodeid) {
  Fs &fs = fs_of(req);
  if (nodeid == FUSE_ROOT_ID) return fs.root;
  InodePtr i = fs.inodes.get(nodeid);
  if (i && !i->gone) return i;
  // The kernel holds a lookup of every nodeid it sends: one the table lacks is a fault of
  // the daemon's bookkeeping (an object whose creator aborted is `gone`, and expected).
  static std::atomic<int> logged{0};
  if (!i && logged.fetch_add(1, std::memory_order_relaxed) < 20)
    spdlog::warn("request from pid {} names nodeid {}, which the daemon does not know: "
                 "answered ESTALE", fuse_req_ctx(req)->pid, nodeid);
  return nullptr;
}

namespace {

// Handle-table names are only real entry names; "." and ".." record none.
bool is_real_name(const char *name) {
  return name && std::strcmp(name, ".") != 0 && std::strcmp(name, "..") != 0;
}

int stat_fd(int fd, struct stat *st) {
  return ::fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 ? 0 : errno;
}

void fill_entry(const Fs &fs, const Inode &i, const struct stat &st, fuse_entry_param *e) {
  std::memset(e, 0, sizeof *e);
  e->ino = i.nodeid;
  e->generation = i.generation;
  e->attr = st;
  e->attr_timeout = fs.opts.attr_timeout;
  e->entry_timeout = fs.opts.entry_timeout;
}

// Records the object behind `i` in the handle table: always for a fresh object,
// otherwise only when the table has no row for it yet (created before txnfs knew
// the tree, or its row was lost to a crash) or an outdated one.
void record_handle(Fs &fs, const Inode &i, uint64_t parent, const char *name, bool fresh) {
  if (!fresh) {
    auto row = fs.db->handle(i.nodeid);
    if (row && row->generation == i.generation && row->ino == i.ino) return;
  }
  HandleRow row;
  row.nodeid = i.nodeid;
  row.generation = i.generation;
  row.ino = i.ino;
  row.fh = i.fh;
  row.type = i.type;
  if (is_real_name(name)) {
    row.parent = parent;
    row.name = name;
  }
  if (fresh) fs.db->put_handle(row);
  else fs.db->repair_handle(row);  // not if the object lost its row since it was found
}

// Shared tail of lookups: `fd` is an O_PATH fd to the object found as `name` in
// `parent`; the fd cache keeps it for the next request on the object. A known nodeid
// of another generation is an earlier object whose inode number the found one reuses:
// it gets a new Inode (see txn/inode.h). With `unrecorded`, a handle row the object
// needs is not written but reported there: the caller records it once it knows the
// object is committed (lookup_committed).
int lookup_fd(Fs &fs, UniqueFd fd, uint64_t parent, const char *name, bool fresh,
              fuse_entry_param *e, bool *unrecorded = nullptr) {
  struct stat st;
  if (int err = stat_fd(fd.get(), &st)) return err;
  uint64_t nodeid = fs.nodeid_of(st.st_ino);
  InodePtr i = make_inode(fd.get(), nodeid, st);
  InodePtr known = fs.inodes.get(nodeid);
  if (known && known->generation == i->generation) {
    i = std::move(known);
  } else if (unrecorded) {
    *unrecorded = true;
  } else {
    record_handle(fs, *i, parent, name, fresh);
  }
  fs.fds.adopt(*i, std::move(fd));
  i = fs.inodes.add_lookup(i);
  fill_entry(fs, *i, st, e);
  return 0;
}

int lookup_name(Fs &fs, const InodePtr &parent, const char *name, bool fresh, fuse_entry_param *e,
                bool *unrecorded = nullptr) {
  if (parent->nodeid == FUSE_ROOT_ID && std::strcmp(name, "..") == 0)
    name = ".";  // the tree root is its own parent: never step into the store
  InodeFd dir = fs.pin(*parent);
  if (!dir) return dir.err();
  UniqueFd fd(::openat(dir.get(), name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fd.err();
  return lookup_fd(fs, std::move(fd), parent->nodeid, name, fresh, e, unrecorded);
}

int lookup_self(Fs &fs, uint64_t nodeid, fuse_entry_param *e, const Op *op = nullptr);

// Whether the requester must be shown the committed attributes of `nodeid`: a plain
// reader while transactions are open, and a transaction reading an object that other
// open transactions may have changed and it did not -- a directory (it reads
// directories under IS, op_getattr) or anything it looks up (a LOOKUP locks the name,
// not the object it names). (A directory both it and others changed shows both.)
bool sees_committed_attrs(const Op &op, uint64_t nodeid) {
  return op.plain_isolated() || (op.txn() && !op.txn()->changed_shared(nodeid));
}

// Replaces `st` (read from the tree through `fd`) by the committed attributes where the
// requester must see those and an open transaction changed them. Returns true when it
// did: they may change, so the kernel must not cache them; cached, they would be served
// to everyone for the mount's attribute lifetime.
bool committed_attrs_for(const Op &op, uint64_t nodeid, int fd, struct stat &st) {
  return sees_committed_attrs(op, nodeid) && !op.fs().view.attrs(nodeid, fd, st);
}

// Whether the directory `fd` is in the tree: its ".." chain reaches the tree's root
// before it reaches the store's (or the file system's) root.
bool in_tree(Fs &fs, int fd) {
  struct stat tree, st;
  if (stat_fd(fs.tree_fd, &tree) != 0 || stat_fd(fd, &st) != 0) return false;
  UniqueFd cur;
  for (int depth = 0; depth < 4096; depth++) {
    if (st.st_ino == tree.st_ino && st.st_dev == tree.st_dev) return true;
    UniqueFd up(::openat(cur ? cur.get() : fd, "..", O_PATH | O_NOFOLLOW | O_CLOEXEC));
    struct stat ust;
    if (!up || stat_fd(up.get(), &ust) != 0 || ust.st_ino == st.st_ino) return false;
    cur = std::move(up);
    st = ust;
  }
  return false;
}

// LOOKUP(dir, ".."): what the kernel asks to find a directory's parent (file handles,
// an NFS server's LOOKUPP). A directory a transaction removed lives in its undo log
// until the end; its ".." there is internal (STORE/.txnfs, never reachable through
// the mount). A plain reader is shown where the directory was before the open
// transaction moved or removed it; anyone else, that it has no parent (ENOENT), as for
// a removed directory.
int lookup_dotdot(Fs &fs, const Op &op, const InodePtr &dir, fuse_entry_param *e) {
  if (dir->nodeid == FUSE_ROOT_ID) return lookup_self(fs, FUSE_ROOT_ID, e);
  if (op.plain_isolated())
    if (auto before = fs.view.committed_parent(dir->ino)) return lookup_self(fs, *before, e);
  InodeFd d = fs.pin(*dir);
  if (!d) return d.err();
  UniqueFd up(::openat(d.get(), "..", O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!up) return up.err();
  if (!in_tree(fs, up.get())) return ENOENT;
  return lookup_fd(fs, std::move(up), dir->nodeid, "..", false, e);
}

// LOOKUP(nodeid, "."): the kernel resolving a file handle (possibly from before a
// restart). Serves any nodeid the handle table knows; anything else is stale. An
// object whose last name the requester's transaction removed (it waits in the undo log)
// is removed for it, as is one whose removal was committed lazily (`op` adjusts the
// link count for both); a plain reader while the remover is open still finds it.
int lookup_self(Fs &fs, uint64_t nodeid, fuse_entry_param *e, const Op *op) {
  auto removed = [op](struct stat st) {
    if (op) op->adjust(st);
    return st.st_nlink == 0;
  };
  if (InodePtr i = nodeid == FUSE_ROOT_ID ? fs.root : fs.inodes.get(nodeid)) {
    InodeFd fd = fs.pin(*i);
    if (!fd) return ENOENT;  // removed and freed; the kernel reports ESTALE
    struct stat st;
    if (int err = stat_fd(fd.get(), &st)) return err;
    // Removed, and the kernel has not forgotten it yet (it holds it under another
    // nodeid). A view asking for it is served it, as the plain side is from the
    // kernel's inode cache (fuzz divergence handle-of-unlinked-inode), so that a
    // transactional NFS COMPOUND's PUTFH of a removed file Ganesha still holds open
    // answers as a plain COMPOUND's does. The plain side asking gets ENOENT.
    if (removed(st) && Views::current() == 0) return ENOENT;
    i = fs.inodes.add_lookup(i);
    fill_entry(fs, *i, st, e);
    return 0;
  }
  auto row = fs.db->handle(nodeid);
  if (!row) return ENOENT;  // the kernel reports ESTALE
  UniqueFd fd = open_by_fh(fs.tree_fd, row->fh, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (!fd) return ENOENT;
  struct stat st;
  if (stat_fd(fd.get(), &st) != 0 || st.st_ino != row->ino || removed(st)) return ENOENT;
  return lookup_fd(fs, std::move(fd), 0, nullptr, false, e);
}

// A plain lookup while transactions are open: the committed state of the entry,
// without waiting for their locks (see txn/committed_view.h for why reading the tree first and
// the registry second is consistent). Sets *snapshot when an open transaction
// changed the entry, so the answer must not be cached.
int lookup_committed(Fs &fs, const InodePtr &parent, const char *name, fuse_entry_param *e,
                     bool *snapshot) {
  bool unrecorded = false, looked_up = false;
  int err = 0;
  std::optional<EntryBefore> before;
  bool quiet = fs.view.until_quiet([&] {
    if (looked_up) fs.forget(e->ino, 1);  // again: a rollback may have moved it
    unrecorded = false;
    err = lookup_name(fs, parent, name, false, e, &unrecorded);
    looked_up = err == 0;
    before = fs.view.before(parent->nodeid, name);
    return true;
  });
  if (!quiet) {
    if (looked_up) fs.forget(e->ino, 1);
    return EIO;
  }
  *snapshot = before.has_value();
  if (!before) {
    // Only now is the object known to be committed. Recorded before the check, the row
    // of an object an open transaction created would outlive its rollback.
    if (err == 0 && unrecorded)
      if (InodePtr i = fs.inodes.get(e->ino)) record_handle(fs, *i, parent->nodeid, name, false);
    return err;
  }
  if (err == 0) fs.forget(e->ino, 1);
  if (!before->existed) return ENOENT;
  UniqueFd fd = open_by_fh(fs.tree_fd, before->fh, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (!fd) return ENOENT;
  // The committed object may be one the transaction removes: its row goes when that
  // commits, and must not come back through this lookup. No row is written here.
  return lookup_fd(fs, std::move(fd), 0, nullptr, false, e, &unrecorded);
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
  Op op(req);
  stall::lookup_hook(name);  // test hook: a request in flight (counted by Op) that stalls
  Fs &fs = op.fs();
  fuse_entry_param e;
  int err = op.read_error();
  {
    if (err) {
    } else if (std::strcmp(name, ".") == 0) {
      // A file handle of an object an open transaction made leads nowhere for others
      // (its transaction reaches it through its view's nodeid).
      if (op.plain_isolated() && fs.txns->made_by_open(parent)) err = ESTALE;
      else err = lookup_self(fs, parent, &e, &op);
    } else {
      InodePtr p = inode_of(req, parent);
      bool snapshot = false;
      if (!p) err = ESTALE;
      else if (std::strcmp(name, "..") == 0) err = lookup_dotdot(fs, op, p, &e);
      else if (op.plain_isolated()) err = lookup_committed(fs, p, name, &e, &snapshot);
      else if (!(err = op.lock_entry(parent, name, false)))
        err = lookup_name(fs, p, name, false, &e);
      // What an open transaction may still change must not stay in kernel caches.
      bool volatile_entry = snapshot || (op.shared_name(parent) && fs.view.before(parent, name));
      if (err == ENOENT) {  // negative entry: the kernel may cache the miss
        std::memset(&e, 0, sizeof e);
        op.set_timeouts(e, volatile_entry);
      } else if (!err) {
        finish_entry(op, e, volatile_entry);
      }
      if (err == 0 || err == ENOENT) {
        // A plain reader was shown the committed entry, which the transaction that
        // changed it must not be shown: the kernel has one dentry for both.
        if (snapshot) e.entry_timeout = 0;
        fs.views.to_kernel(e);
        fuse_reply_entry(req, &e);
        return;
      }
    }
  }
  if (err) return (void)fuse_reply_err(req, err);
  finish_entry(op, e, false);  // LOOKUP "." (a file handle): as any other lookup
  fs.views.to_kernel(e);
  fuse_reply_entry(req, &e);
}

void op_forget(fuse_req_t req, fuse_ino_t nodeid, uint64_t nlookup) {
  fs_of(req).forget(nodeid, nlookup);
  fuse_reply_none(req);
}

void op_forget_multi(fuse_req_t req, size_t count, fuse_forget_data *forgets) {
  Fs &fs = fs_of(req);
  for (size_t k = 0; k < count; k++) fs.forget(forgets[k].ino, forgets[k].nlookup);
  fuse_reply_none(req);
}

void op_getattr(fuse_req_t req, fuse_ino_t nodeid, fuse_file_info *) {
  Op op(req);
  auto [i, err] = op.on_read(nodeid);
  struct stat st;
  // A directory's attributes are read under IS, not S: the kernel asks for them at every
  // permission check of a path walk through it, and S held to the end of a transaction
  // kept every other transaction from making or removing any name in that directory
  // (IX) -- whose request then waits holding the directory's inode lock, which the
  // walker's next lookup there needs: a cycle only the lock timeout broke. Its names
  // stay locked one by one; what other open transactions changed of its attributes is
  // read as committed (below).
  bool dir = !err && S_ISDIR(i->type);
  if (!err && !op.plain_isolated()) err = op.lock_object(nodeid, dir ? LockMode::IS : LockMode::S);
  InodeFd fd = err ? InodeFd() : op.fs().pin(*i);
  if (!err && !fd) err = fd.err();
  if (!err) err = stat_fd(fd.get(), &st);
  if (err) return (void)fuse_reply_err(req, err);
  double timeout = op.attr_timeout(nodeid);
  if (committed_attrs_for(op, nodeid, fd.get(), st)) timeout = 0;
  op.adjust(st);
  fuse_reply_attr(req, &st, timeout);
}

// Does the object have an access ACL? (A mode change rewrites its mask.)
bool has_access_acl(Fs &fs, const Inode &i) {
  if (S_ISLNK(i.type)) return false;
  InodeFd fd = fs.pin(i);
  return fd && ::getxattr(proc_path(fd.get()).c_str(), "system.posix_acl_access", nullptr, 0) >= 0;
}

void op_setattr(fuse_req_t req, fuse_ino_t nodeid, struct stat *attr, int valid,
                fuse_file_info *fi) {
  Op op(req);
  auto [i, err] = op.on(nodeid, LockMode::X);
  if (!err && op.txn()) {
    err = (valid & FUSE_SET_ATTR_SIZE) ? save_truncate(op.fs(), *op.txn(), *i, attr->st_size)
                                       : save_attrs(op.fs(), *op.txn(), *i);
    // XFS keeps an access ACL's mask and the mode's group bits in step: a chmod changes
    // the ACL xattr too, which plain readers must keep seeing as committed.
    if (!err && (valid & FUSE_SET_ATTR_MODE) && has_access_acl(op.fs(), *i))
      err = save_xattrs(op.fs(), *op.txn(), *i);
  }
  InodeFd fd = err ? InodeFd() : op.fs().pin(*i);
  if (!err && !fd) err = fd.err();
  if (err) return (void)fuse_reply_err(req, err);
  // A SETATTR that sets nothing is a chown changing no id (chown(f, -1, -1)), or the
  // kernel's clearing of set-ID bits before a write (file_remove_privs): with
  // HANDLE_KILLPRIV_V2 it leaves the clearing to the file system, and without a
  // write-back cache it sends no ctime. On XFS both update the ctime; a chown changing
  // no id, made here by the daemon, does that (and XFS clears S_ISUID then itself).
  constexpr int kAttrs = FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID |
                         FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME |
                         FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW;
  bool chown = (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) || !(valid & kAttrs);
  mode_t clear = 0;  // set-ID bits the chown clears that XFS keeps for the daemon
  struct stat st;
  int rc = 0;
  if (valid & FUSE_SET_ATTR_MODE)
    rc = fi ? ::fchmod(fd_of(fi), attr->st_mode)
            : ::chmod(proc_path(fd.get()).c_str(), attr->st_mode);
  if (rc == 0 && chown) {
    uid_t uid = (valid & FUSE_SET_ATTR_UID) ? attr->st_uid : uid_t(-1);
    gid_t gid = (valid & FUSE_SET_ATTR_GID) ? attr->st_gid : gid_t(-1);
    rc = ::fstatat(fd.get(), "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
    if (rc == 0) {
      clear = setid_bits_to_clear(req, st, SetidChange::kChown);  // by the old group
      if (!(valid & kAttrs))
        if (int e = may_clear_by_empty_setattr(req, st, clear)) return (void)fuse_reply_err(req, e);
      rc = ::fchownat(fd.get(), "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
    }
  }
  // XFS changes nothing at all -- set-ID bits stay -- when a truncation that sets no
  // times (truncate(2), not ftruncate) takes an empty file without extents to size 0
  // (xfs_setattr_size); the daemon's own truncate below meets the same short cut. FUSE
  // sends neither call's times (update_mtime): an ftruncate is the one with a file.
  bool xfs_no_op = false;
  if (rc == 0 && !fi && (valid & kAttrs) == FUSE_SET_ATTR_SIZE && attr->st_size == 0 &&
      stat_fd(fd.get(), &st) == 0)
    xfs_no_op = st.st_size == 0 && st.st_blocks == 0;
  if (rc == 0 && (valid & FUSE_SET_ATTR_SIZE))
    rc = fi ? ::ftruncate(fd_of(fi), attr->st_size)
            : ::truncate(proc_path(fd.get()).c_str(), attr->st_size);
  if (rc == 0 && (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
    auto pick = [valid](int set, int now, const timespec &t) {
      if (valid & now) return timespec{0, UTIME_NOW};
      return (valid & set) ? t : timespec{0, UTIME_OMIT};
    };
    timespec tv[2] = {pick(FUSE_SET_ATTR_ATIME, FUSE_SET_ATTR_ATIME_NOW, attr->st_atim),
                      pick(FUSE_SET_ATTR_MTIME, FUSE_SET_ATTR_MTIME_NOW, attr->st_mtim)};
    rc = fi ? ::futimens(fd_of(fi), tv) : ::utimensat(fd.get(), "", tv, AT_EMPTY_PATH);
  }
  if (rc != 0) return (void)fuse_reply_err(req, errno);
  // A truncation clears set-ID bits (FUSE_SET_ATTR_KILL_SUID is the kernel's
  // FATTR_KILL_SUIDGID: both bits), unless the mode was set with it.
  if ((valid & FUSE_SET_ATTR_SIZE) && !(valid & FUSE_SET_ATTR_MODE) && !xfs_no_op) {
    if (int e = stat_fd(fd.get(), &st)) return (void)fuse_reply_err(req, e);
    clear |= setid_bits_to_clear(req, st, SetidChange::kData, valid & FUSE_SET_ATTR_KILL_SUID);
  }
  // (No invalidation: the reply carries the attributes.)
  if (int e = clear_setid_bits(fd.get(), clear)) return (void)fuse_reply_err(req, e);
  if (int e = stat_fd(fd.get(), &st)) return (void)fuse_reply_err(req, e);
  op.adjust(st);
  fuse_reply_attr(req, &st, op.attr_timeout(nodeid));
}

void op_readlink(fuse_req_t req, fuse_ino_t nodeid) {
  Op op(req);
  // A symlink's target never changes (only its name does): no lock needed.
  auto [i, err] = op.on_read(nodeid);
  InodeFd fd = err ? InodeFd() : op.fs().pin(*i);
  if (!err && !fd) err = fd.err();
  if (err) return (void)fuse_reply_err(req, err);
  char buf[PATH_MAX + 1];
  ssize_t n = ::readlinkat(fd.get(), "", buf, sizeof buf);
  if (n < 0) return (void)fuse_reply_err(req, errno);
  if (n == ssize_t(sizeof buf)) return (void)fuse_reply_err(req, ENAMETOOLONG);
  buf[n] = 0;
  fuse_reply_readlink(req, buf);
}

// Gives a just-created entry the caller's ownership (the daemon creates as root).
// In a set-group-ID directory the group stays the directory's, as the backing file
// system set it. chown clears set-ID bits, so they are put back afterwards.
// The bits put back are those the entry was born with (a default ACL may have masked
// the mode asked for).
int own_new_entry(fuse_req_t req, int dirfd, const char *name, mode_t mode) {
  const fuse_ctx *ctx = fuse_req_ctx(req);
  struct stat pst, st;
  if (ctx->uid == 0 && ctx->gid == 0) return 0;  // the daemon's own: nothing to change
  if (int err = stat_fd(dirfd, &pst)) return err;
  gid_t gid = (pst.st_mode & S_ISGID) ? gid_t(-1) : ctx->gid;
  if (ctx->uid == 0 && gid == gid_t(-1)) return 0;
  if (::fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno;
  if (::fchownat(dirfd, name, ctx->uid, gid, AT_SYMLINK_NOFOLLOW) != 0) return errno;
  if (!S_ISLNK(mode) && (st.st_mode & (S_ISUID | S_ISGID | S_ISVTX)) &&
      ::fchmodat(dirfd, name, st.st_mode & 07777, 0) != 0)
    return errno;
  return 0;
}

// The mode a new object is made with. The kernel sends it without the caller's umask
// (POSIX_ACL + DONT_MASK): as on XFS (posix_acl_create), the umask applies only when the
// parent has no default ACL; with one, the backing file system masks the mode by the ACL
// (the daemon's umask is 0; transactions make objects in place too). Called with the
// parent's entry lock held, so the parent's default ACL cannot change in between.
mode_t creation_mode(fuse_req_t req, Inode &dir, int dirfd, mode_t mode) {
  if (S_ISLNK(mode)) return mode;
  // Read once per directory, not per creation: through /proc/self/fd it is one of the
  // dearest steps of a create (the fd is O_PATH).
  int8_t known = dir.default_acl.load(std::memory_order_acquire);
  ssize_t n = 0;
  if (known == Inode::kUnknown) {
    n = ::getxattr(proc_path(dirfd).c_str(), "system.posix_acl_default", nullptr, 0);
    if (n > 0) known = Inode::kAcl;
    else if (n < 0 && (errno == ENODATA || errno == EOPNOTSUPP)) known = Inode::kNoAcl;
    if (known != Inode::kUnknown) {
      int8_t expected = Inode::kUnknown;  // (a reset meanwhile wins: read again next time)
      dir.default_acl.compare_exchange_strong(expected, known, std::memory_order_acq_rel);
    }
  }
  if (known == Inode::kAcl) return mode;
  return mode & ~(fuse_req_ctx(req)->umask & 0777);
}

// Makes a new entry `name` in `parent` with `make(dirfd, name)`: directly for a
// plain request, through the undo log for a transaction. Then records its handle
// and fills `e`. On failure nothing is left behind.
int make_entry(fuse_req_t req, Op &op, const InodePtr &parent, const char *name, mode_t mode,
               const std::function<int(int, const char *, mode_t)> &make_as, fuse_entry_param *e) {
  Fs &fs = op.fs();
  int err = op.lock_entry(parent->nodeid, name, true);
  if (err) return err;
  InodeFd dir = fs.pin(*parent);
  if (!dir) return dir.err();
  mode = creation_mode(req, *parent, dir.get(), mode);
  // Made and given to the caller, the same way for both (a transaction's undo step is
  // written before txn_make calls this).
  auto make = [&](int dirfd, const char *n) {
    if (int e = make_as(dirfd, n, mode & 07777)) return e;
    int e = own_new_entry(req, dirfd, n, mode);
    if (e) ::unlinkat(dirfd, n, S_ISDIR(mode) ? AT_REMOVEDIR : 0);
    return e;
  };
  UniqueFd made;  // a transaction's new object, as txn_make opened it
  if (Txn *t = op.txn()) {
    if ((err = txn_make(fs, *t, *parent, name, mode, make, &made))) return err;
  } else if ((err = make(dir.get(), name))) {
    return err;
  }
  auto unmake = [&] {  // a plain request's entry goes again (a transaction's abort undoes it)
    if (!op.txn()) ::unlinkat(dir.get(), name, S_ISDIR(mode) ? AT_REMOVEDIR : 0);
  };
  try {
    err = made ? lookup_fd(fs, std::move(made), parent->nodeid, name, true, e)
               : lookup_name(fs, parent, name, true, e);
  } catch (...) {  // its handle row could not be written: serve() answers the error
    unmake();
    throw;
  }
  if (err) unmake();
  if (!err) op.set_timeouts(*e, op.shared_name(parent->nodeid));
  return err;
}

void reply_new_entry(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                     const std::function<int(int, const char *, mode_t)> &make) {
  Op op(req);
  auto [p, err] = op.on(parent);
  fuse_entry_param e;
  if (!err) err = make_entry(req, op, p, name, mode, make, &e);
  if (err) return (void)fuse_reply_err(req, err);
  op.fs().views.to_kernel(e);
  fuse_reply_entry(req, &e);
}

int errno_of(int rc) { return rc == 0 ? 0 : errno; }

void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev) {
  reply_new_entry(req, parent, name, mode, [&](int dirfd, const char *n, mode_t perms) {
    return errno_of(::mknodat(dirfd, n, (mode & S_IFMT) | perms, rdev));
  });
}

void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
  reply_new_entry(req, parent, name, S_IFDIR | mode, [&](int dirfd, const char *n, mode_t perms) {
    return errno_of(::mkdirat(dirfd, n, perms));
  });
}

void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name) {
  reply_new_entry(req, parent, name, S_IFLNK | 0777, [&](int dirfd, const char *n, mode_t) {
    return errno_of(::symlinkat(link, dirfd, n));
  });
}

void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
               fuse_file_info *fi) {
  Op op(req);
  auto [p, err] = op.on(parent);
  UniqueFd fd;
  fuse_entry_param e;
  if (!err)
    err = make_entry(
        req, op, p, name, S_IFREG | mode,
        [&](int dirfd, const char *n, mode_t perms) {
          fd.reset(::openat(dirfd, n, backing_open_flags(fi->flags) | O_CREAT | O_EXCL, perms));
          return fd ? 0 : fd.err();
        },
        &e);
  if (err) return (void)fuse_reply_err(req, err);
  InodePtr made = inode_of(req, e.ino);
  if (made && op.cacheable() && direct_writer(fi->flags)) made->txn_written = true;
  fi->keep_cache = op.cacheable();
  fi->noflush = 1;
  fi->direct_io = !op.cacheable() || (fi->flags & O_DIRECT);
  op.set_fh(fi, fd.release(), op.txn() ? made : nullptr);
  if (made) op.passthrough(fi, *made);
  op.fs().views.to_kernel(e);
  fuse_reply_create(req, &e, fi);
}

void op_link(fuse_req_t req, fuse_ino_t nodeid, fuse_ino_t newparent, const char *newname) {
  Op op(req);
  Fs &fs = op.fs();
  InodePtr i = inode_of(req, nodeid), p = inode_of(req, newparent);
  int err = op.error() ? op.error() : (!i || !p) ? ESTALE : 0;
  if (!err) err = op.lock_entry(newparent, newname, true);
  if (!err) err = op.lock_object(nodeid, LockMode::X);
  InodeFd fd = err ? InodeFd() : fs.pin(*i);
  InodeFd dir = err ? InodeFd() : fs.pin(*p);
  if (!err && !fd) err = fd.err();
  if (!err && !dir) err = dir.err();
  if (!err) {
    if (op.txn()) err = txn_link(fs, *op.txn(), *i, *p, newname);
    else
      err = errno_of(
          ::linkat(AT_FDCWD, proc_path(fd.get()).c_str(), dir.get(), newname, AT_SYMLINK_FOLLOW));
  }
  struct stat st;
  if (!err) err = stat_fd(fd.get(), &st);
  if (err) return (void)fuse_reply_err(req, err);
  fuse_entry_param e;
  fs.inodes.add_lookup_existing(i);
  fill_entry(fs, *i, st, &e);
  op.set_timeouts(e, op.shared_name(newparent));
  fs.views.to_kernel(e);
  fuse_reply_entry(req, &e);
}

// After `victim_fd`'s entry (parent, name) was removed or replaced: drop the row when
// the object is gone, else forget that name of it.
// A name change is made in the tree, but the handle rows that follow it could not be
// written (SQLite refused, `e`). The change stands, so the table is marked for
// reconciling (mark_handles_stale: the next recovery makes the rows follow the tree).
// A plain request answers success: the tree changed as it asked, and a handle is
// found by its object, not its row's name, until then. A transaction's request fails
// with the error and dooms the transaction: only its abort can end it, which puts the
// names back.
int rows_not_written(Fs &fs, Op &op, const std::string &what, const std::exception &e) {
  spdlog::error("{}: the handle table could not follow: {}", what, e.what());
  mark_handles_stale(fs.paths, what + ": " + e.what());
  Txn *t = op.txn();
  if (!t) return 0;
  int err = errno_in(e) > 0 ? errno_in(e) : EIO;
  t->doom(err);
  return err;
}

void unrecord_name(Fs &fs, int victim_fd, uint64_t parent, const char *name) {
  struct stat st;
  if (stat_fd(victim_fd, &st) != 0) return;
  if (st.st_nlink == 0 || S_ISDIR(st.st_mode)) fs.db->remove_handle(fs.nodeid_of(st.st_ino));
  else fs.db->clear_handle_name(parent, name);
}

void remove_entry(fuse_req_t req, fuse_ino_t parent, const char *name, int flags) {
  Op op(req);
  Fs &fs = op.fs();
  InodePtr p = inode_of(req, parent);
  int err = op.error() ? op.error() : !p ? ESTALE : op.lock_entry(parent, name, true);
  InodeFd dir = err ? InodeFd() : fs.pin(*p);
  if (!err && !dir) err = dir.err();
  struct stat vst;
  if (!err) err = ::fstatat(dir.get(), name, &vst, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : errno;
  if (!err) err = op.lock_object(fs.nodeid_of(vst.st_ino), LockMode::X);
  if (err) return (void)fuse_reply_err(req, err);
  if (Txn *t = op.txn())
    return (void)fuse_reply_err(req, txn_remove(fs, *t, *p, name, flags & AT_REMOVEDIR));
  int victim = ::openat(dir.get(), name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (victim < 0) return (void)fuse_reply_err(req, errno);
  err = ::unlinkat(dir.get(), name, flags) == 0 ? 0 : errno;
  try {
    if (!err) unrecord_name(fs, victim, parent, name);
  } catch (const std::exception &ex) {
    err = rows_not_written(fs, op, fmt::format("remove {} in {}", name, parent), ex);
  }
  ::close(victim);
  fuse_reply_err(req, err);
}

void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name) {
  remove_entry(req, parent, name, 0);
}

void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name) {
  remove_entry(req, parent, name, AT_REMOVEDIR);
}

// RENAME_WHITEOUT leaves a new object, a whiteout, at the source name: like every
// object it gets its handle row at once (an abort's undo removes the whiteout and
// reports it, and its row goes then).
void record_whiteout(Fs &fs, const InodePtr &parent, const char *name) {
  InodeFd dir = fs.pin(*parent);
  if (!dir) return;
  UniqueFd fd(::openat(dir.get(), name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
  struct stat st;
  if (!fd || stat_fd(fd.get(), &st) != 0) return;
  InodePtr w = make_inode(fd.get(), fs.nodeid_of(st.st_ino), st);
  record_handle(fs, *w, parent->nodeid, name, true);
}

void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
               const char *newname, unsigned int flags) {
  Op op(req);
  Fs &fs = op.fs();
  InodePtr p = inode_of(req, parent), np = inode_of(req, newparent);
  int err = op.error() ? op.error() : (!p || !np) ? ESTALE : 0;
  if (!err) err = op.lock_entry(parent, name, true);
  if (!err) err = op.lock_entry(newparent, newname, true);
  InodeFd dir = err ? InodeFd() : fs.pin(*p);
  InodeFd newdir = err ? InodeFd() : fs.pin(*np);
  if (!err && !dir) err = dir.err();
  if (!err && !newdir) err = newdir.err();
  if (err) return (void)fuse_reply_err(req, err);
  // (Owned: a lock below may park the request, unwinding this handler.)
  UniqueFd src_fd(::openat(dir.get(), name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!src_fd) return (void)fuse_reply_err(req, src_fd.err());
  UniqueFd dst_fd(::openat(newdir.get(), newname, O_PATH | O_NOFOLLOW | O_CLOEXEC));
  int src = src_fd.get(), dst = dst_fd ? dst_fd.get() : -1;
  struct stat sst, dst_st;
  bool same = false;
  if (stat_fd(src, &sst) == 0) err = op.lock_object(fs.nodeid_of(sst.st_ino), LockMode::X);
  if (!err && dst >= 0 && stat_fd(dst, &dst_st) == 0) {
    same = sst.st_ino == dst_st.st_ino;  // hard links of one object: rename does nothing
    err = op.lock_object(fs.nodeid_of(dst_st.st_ino), LockMode::X);
  }
  bool exposed = false;
  if (!err) {
    if (op.txn()) err = txn_rename(fs, *op.txn(), *p, name, *np, newname, flags, &exposed);
    else err = ::renameat2(dir.get(), name, newdir.get(), newname, flags) == 0 ? 0 : errno;
  }
  try {
    if (!err && !same && stat_fd(src, &sst) == 0) {
      uint64_t src_id = fs.nodeid_of(sst.st_ino);
      Txn *t = op.txn();
      bool exchanged = (flags & RENAME_EXCHANGE) && dst >= 0 && stat_fd(dst, &dst_st) == 0;
      uint64_t dst_id = exchanged ? fs.nodeid_of(dst_st.st_ino) : 0;
      if (t) {  // first, outside the MetaDb transaction (see save_row_name)
        if (exchanged) save_row_name(fs, *t, dst_id);
        save_row_name(fs, *t, src_id);
      }
      fs.db->transaction([&] {
        if (flags & RENAME_EXCHANGE) {
          if (exchanged) fs.db->set_handle_name(dst_id, parent, name);
        } else if (dst >= 0 && !t) {
          unrecord_name(fs, dst, newparent, newname);  // (a transaction keeps it stashed)
        }
        fs.db->set_handle_name(src_id, newparent, newname);
      });
    }
    if (!err && (flags & RENAME_WHITEOUT)) {
      // XFS makes the whiteout with the caller's ids (as any new object); the daemon
      // made it as root. The rename is done: a failure here is only reported.
      if (int e = own_new_entry(req, dir.get(), name, S_IFCHR))
        spdlog::warn("giving whiteout {} in {} to its caller: {}", name, parent, std::strerror(e));
      record_whiteout(fs, p, name);
    }
  } catch (const std::exception &ex) {
    err = rows_not_written(
        fs, op, fmt::format("rename {} in {} to {} in {}", name, parent, newname, newparent), ex);
  }
  // Before the reply, after which the kernel moves its dentries: a name cached with a
  // lifetime must not answer from the cache at its new place (txn_rename). Where the
  // kernel cannot expire names, drop them from the invalidator thread instead, as soon
  // as the rename has released the directories' locks (a short window).
  // (Through a view the kernel moves the view's dentries only: nothing is exposed.)
  if (!err && exposed && Views::current() == 0 && !fs.cache->expire_names()) {
    fs.cache->entry(newparent, newname);
    if (flags & RENAME_EXCHANGE) fs.cache->entry(parent, name);
    fs.cache->post();
  }
  fuse_reply_err(req, err);
}

}  // namespace

// Registers the namespace ops; the data and directory ops add theirs.
void add_entry_ops(fuse_lowlevel_ops &ops) {
  ops.lookup = op_lookup;
  ops.forget = op_forget;
  ops.forget_multi = op_forget_multi;
  ops.getattr = op_getattr;
  ops.setattr = op_setattr;
  ops.readlink = op_readlink;
  ops.mknod = op_mknod;
  ops.mkdir = op_mkdir;
  ops.symlink = op_symlink;
  ops.create = op_create;
  ops.link = op_link;
  ops.unlink = op_unlink;
  ops.rmdir = op_rmdir;
  ops.rename = op_rename;
}

int do_lookup(Fs &fs, const InodePtr &parent, const char *name, fuse_entry_param *e) {
  return lookup_name(fs, parent, name, false, e);
}

// `volatile_entry`: an open transaction may still change the name. For a plain reader
// that also means the object's attributes are the committed ones it was shown, not
// cacheable; a transaction's own lookup keeps the lifetime Op::attr_timeout gives the
// object (cached if the transaction made it: no one else can reach it), or else every
// walk through a directory it made would fetch the directory's attributes again.
void finish_entry(const Op &op, fuse_entry_param &e, bool volatile_entry) {
  Fs &fs = op.fs();
  bool committed_attrs = volatile_entry && !op.txn();
  if (sees_committed_attrs(op, e.ino))  // (never while no transaction is open)
    if (InodePtr i = fs.inodes.get(e.ino))
      if (InodeFd fd = fs.pin(*i); fd && !fs.view.attrs(e.ino, fd.get(), e.attr))
        volatile_entry = committed_attrs = true;
  op.set_timeouts(e, volatile_entry);
  if (committed_attrs) e.attr_timeout = 0;
}

}  // namespace txnfs
