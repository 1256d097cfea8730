#include "txnfuse/txn/recorder.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>

#include <spdlog/spdlog.h>

#include "store/backing.h"
#include "store/crash_point.h"
#include "store/error.h"
#include "recovery/undo/undo_step.h"
#include "store/unique_fd.h"

namespace txnfs {

namespace {

BackingId id_of(const Inode &i) {
  BackingId b;
  b.ino = i.ino;
  b.generation = i.generation;
  b.fh = i.fh;
  return b;
}

// The transaction's log, created at its first change. Caller holds t.mu.
UndoLog &log_of(TxnEnv &env, Txn &t) REQUIRES(t.mu) {
  if (!t.log) {
    t.log = UndoLog::create(env.backups_fd, t.id(), env.reflink);
    if (StepMirror *m = t.mirror)
      t.log->set_observer([m](uint64_t txid, const UndoStep &s) { m->add(txid, s); });
  }
  return *t.log;
}

// Runs `fn` (which records undo steps) and turns failures into an errno, dooming the
// transaction: with a step missing, the only safe way out is abort.
template <typename F>
int recording(TxnEnv &env, Txn &t, const char *what, F &&fn) REQUIRES(t.mu) {
  try {
    int err = fn();
    // --undo-sync: make each step durable on its own (correct but slow; the default
    // relies on XFS's ordered journal instead, see docs/crash-model.md).
    if (env.undo_sync && t.log && ::fsync(t.log->dir_fd()) != 0) throw_errno("fsync", errno);
    return err;
  } catch (const std::exception &e) {
    spdlog::error("transaction {}: cannot record undo for {}: {}", t.id(), what, e.what());
    int err = errno_in(e) == ENOSPC ? ENOSPC : EIO;
    t.doom(err);
    return err;
  }
}

// Attrs step for the object (`fd`, identity `id`) unless it has one or was made by
// this transaction. Caller holds t.mu.
void save_attrs_locked(TxnEnv &env, Txn &t, int fd, const BackingId &id) REQUIRES(t.mu) {
  TouchedObject &o = t.objects[env.nodeid_of(id.ino)];
  if (o.created || o.attrs_saved) return;
  struct stat st;
  if (::fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) throw_errno("stat", errno);
  UndoStep s;
  s.kind = StepKind::Attrs;
  s.obj = id;
  s.mode = st.st_mode;
  s.uid = st.st_uid;
  s.gid = st.st_gid;
  s.size = uint64_t(st.st_size);
  s.atime = st.st_atim;
  s.mtime = st.st_mtim;
  UndoLog &log = log_of(env, t);
  log.append(s);
  o.orig = st;
  o.attrs_saved = true;
  env.view.note_attrs(t.id(), env.nodeid_of(id.ino), st, log.dir_fd());
  // Writing, truncating or chowning a file drops its capabilities (even as root):
  // keep them with its xattrs, so that undo can put them back.
  if (S_ISREG(st.st_mode) &&
      ::getxattr(proc_path(fd).c_str(), "security.capability", nullptr, 0) >= 0) {
    UndoStep x;
    x.kind = StepKind::Xattrs;
    x.obj = id;
    uint64_t seq = log.snapshot_xattrs(fd, x);
    env.view.note_xattrs(env.nodeid_of(id.ino), step_name(seq) + ".d");
    o.xattrs_saved = true;
  }
}

void save_attrs_locked(TxnEnv &env, Txn &t, const Inode &obj, const InodeFd &fd) REQUIRES(t.mu) {
  save_attrs_locked(env, t, fd.get(), id_of(obj));
}

// Records the committed state of (dir, name) for plain readers (see txn/committed_view.h),
// before the transaction's first change to that entry: `obj` is what the name holds
// (opened O_PATH, `st` its stat, `id` its handle), or nothing.
void note_before(TxnEnv &env, Txn &t, const Inode &dir, const char *name, int obj,
                 const struct stat *st, const BackingId *id) {
  EntryBefore b;
  if (obj >= 0) {
    b.existed = true;
    b.ino = id->ino;
    b.fh = id->fh;
    b.type = st->st_mode & S_IFMT;
  }
  env.view.record(t.id(), dir.nodeid, name, std::move(b));
}

// The same, opening the name itself. Returns whether the entry exists.
bool note_before(TxnEnv &env, Txn &t, const Inode &dir, const InodeFd &dirfd, const char *name) {
  UniqueFd fd{::openat(dirfd.get(), name, O_PATH | O_NOFOLLOW | O_CLOEXEC)};
  if (!fd) {
    note_before(env, t, dir, name, -1, nullptr, nullptr);
    return false;
  }
  struct stat st;
  if (::fstatat(fd.get(), "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0)
    throw_errno("stat", errno);
  BackingId id = backing_id(fd.get(), st);
  note_before(env, t, dir, name, fd.get(), &st, &id);
  return true;
}

}  // namespace

int save_attrs(TxnEnv &env, Txn &t, const Inode &obj) {
  InodeFd objfd = env.pin(obj);
  if (!objfd) return objfd.err();
  MutexLock g(t.mu);
  return recording(env, t, "attributes", [&] {
    t.mu.assert_held();  // recording() runs it under t.mu
    save_attrs_locked(env, t, obj, objfd);
    return 0;
  });
}

int save_range(TxnEnv &env, Txn &t, const Inode &obj, uint64_t off, uint64_t len) {
  InodeFd objfd = env.pin(obj);
  if (!objfd) return objfd.err();
  obj.txn_written = true;
  MutexLock g(t.mu);
  return recording(env, t, "data", [&] {
    t.mu.assert_held();  // recording() runs it under t.mu
    save_attrs_locked(env, t, obj, objfd);
    TouchedObject &o = t.objects[obj.nodeid];
    if (o.created || len == 0) return 0;
    uint64_t end = std::min(off + len, uint64_t(o.orig.st_size));
    if (off >= end) return 0;  // only data the file held when the transaction began
    auto gaps = o.backed_up.missing(off, end);
    if (gaps.empty()) return 0;
    UniqueFd fd(::open(proc_path(objfd.get()).c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) throw_errno("open for backup", fd.err());
    for (auto [a, b] : gaps) {
      UndoStep s;
      s.kind = StepKind::Data;
      s.obj = id_of(obj);
      s.off = a;
      s.len = b - a;
      uint64_t seq = log_of(env, t).backup_range(fd.get(), s);
      if (seq) env.view.note_range(obj.nodeid, a, b, step_name(seq) + ".d");
      o.backed_up.add(a, b);
    }
    return 0;
  });
}

int save_truncate(TxnEnv &env, Txn &t, const Inode &obj, uint64_t size) {
  return save_range(env, t, obj, size, UINT64_MAX - size);
}

int save_xattrs(TxnEnv &env, Txn &t, const Inode &obj) {
  InodeFd objfd = env.pin(obj);
  if (!objfd) return objfd.err();
  MutexLock g(t.mu);
  return recording(env, t, "xattrs", [&] {
    t.mu.assert_held();  // recording() runs it under t.mu
    save_attrs_locked(env, t, obj, objfd);
    TouchedObject &o = t.objects[obj.nodeid];
    if (o.created || o.xattrs_saved) return 0;
    UndoStep s;
    s.kind = StepKind::Xattrs;
    s.obj = id_of(obj);
    uint64_t seq = log_of(env, t).snapshot_xattrs(objfd.get(), s);
    env.view.note_xattrs(obj.nodeid, step_name(seq) + ".d");
    o.xattrs_saved = true;
    return 0;
  });
}

// Makes `name` in `parent` in place with `make` (which creates and owns it as a plain
// creation does) and notes it as made. Caller holds t.mu and has recorded what undoes
// it, if anything.
static int make_in_place(TxnEnv &env, Txn &t, const Inode &parent, const InodeFd &dirfd,
                         const char *name, mode_t mode,
                         const std::function<int(int, const char *)> &make, UniqueFd *made)
    REQUIRES(t.mu) {
  if (int err = make(dirfd.get(), name)) return err;
  UniqueFd ofd(::openat(dirfd.get(), name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
  struct stat born;
  if (!ofd || ::fstatat(ofd.get(), "", &born, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) {
    int err = ofd ? errno : ofd.err();
    ::unlinkat(dirfd.get(), name, S_ISDIR(mode) ? AT_REMOVEDIR : 0);
    return err;
  }
  t.objects[env.nodeid_of(born.st_ino)].created = true;
  t.entries[{parent.nodeid, name}] = true;
  if (made) *made = std::move(ofd);
  return 0;
}

// A new object gets one undo step, Made, written before the object exists (so it names
// the place, not the object): undo removes what is at the name (undo_exec.cc, made).
// The name was free when the step was written, the entry lock is held from then until
// the transaction ends, and the step reaches XFS's journal before the creation does, so
// whatever a crash keeps of the creation, the step is there to remove it.
//
// Inside a directory the transaction made, not even that: undoing that directory's own
// step removes it with everything below it (undo_exec.cc, remove_made), and every step
// that put something else there -- a rename, a link, a removal it stashed -- came later
// and is undone first, so all that is left below it then is what the transaction made
// there. No one else can reach the directory, so plain readers need no committed state
// of the name either. The exception is a name the transaction changed before (removed
// or renamed what it named, linked or made something there): undoing that puts
// something back at the name, which must find it free, so a new object there gets its
// step, undone first. (Found by test_fsck.py: a rename's undo met a file made in place
// under the name it had vacated, EEXIST.)
int txn_make(TxnEnv &env, Txn &t, const Inode &parent, const char *name, mode_t mode,
             const std::function<int(int, const char *)> &make, UniqueFd *made) {
  InodeFd dirfd = env.pin(parent);
  if (!dirfd) return dirfd.err();
  MutexLock g(t.mu);
  auto pit = t.objects.find(parent.nodeid);
  bool in_made_dir =
      pit != t.objects.end() && pit->second.created && !t.entries.count({parent.nodeid, name});
  return recording(env, t, "creation", [&]() -> int {
    t.mu.assert_held();  // recording() runs it under t.mu
    if (!in_made_dir) {
      save_attrs_locked(env, t, parent, dirfd);
      if (note_before(env, t, parent, dirfd, name)) return EEXIST;
      UndoStep s;
      s.kind = StepKind::Made;
      s.obj = id_of(parent);
      s.name = name;
      s.flags = S_ISDIR(mode) ? 1 : 0;
      log_of(env, t).append(s);
      // (If the creation fails now, the name stays free and the step finds nothing.)
    }
    return make_in_place(env, t, parent, dirfd, name, mode, make, made);
  });
}

int txn_remove(TxnEnv &env, Txn &t, const Inode &parent, const char *name, bool is_dir) {
  InodeFd dirfd = env.pin(parent);
  if (!dirfd) return dirfd.err();
  MutexLock g(t.mu);
  return recording(env, t, "removal", [&]() -> int {
    t.mu.assert_held();  // recording() runs it under t.mu
    // One walk of the name: its type, its handle, and the committed state of the entry.
    UniqueFd vfd(::openat(dirfd.get(), name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!vfd) return vfd.err();
    struct stat st;
    if (::fstatat(vfd.get(), "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return errno;
    if (is_dir && !S_ISDIR(st.st_mode)) return ENOTDIR;
    if (!is_dir && S_ISDIR(st.st_mode)) return EISDIR;
    if (is_dir && !dir_is_empty(dirfd.get(), name)) return ENOTEMPTY;
    uint64_t nodeid = env.nodeid_of(st.st_ino);
    UndoStep s;
    s.kind = StepKind::Removed;
    s.obj = backing_id(vfd.get(), st);
    t.entries[{parent.nodeid, name}] = false;
    note_before(env, t, parent, name, vfd.get(), &st, &s.obj);
    vfd.reset();  // before the stash moves the object away
    // Stashed even when this transaction made the object: undo replays the exact
    // reverse of what happened, and the steps after its creation (an exchange that
    // moved it to another name, a link) expect it back where they left it.
    save_attrs_locked(env, t, parent, dirfd);
    s.dir = id_of(parent);
    s.name = name;
    s.flags = is_dir ? 1 : 0;
    uint64_t seq = 0;
    if (int err = log_of(env, t).stash(dirfd.get(), name, s, &seq)) return err;
    t.unlinked.emplace(nodeid, Txn::Unlinked{step_name(seq) + ".d", parent.nodeid, name});
    if (!is_dir) t.objects[nodeid].stashed++;
    else t.objects[nodeid].dir_removed = true;
    return 0;
  });
}

int txn_rename(TxnEnv &env, Txn &t, const Inode &parent, const char *name, const Inode &newparent,
               const char *newname, unsigned flags, bool *exposed) {
  *exposed = false;
  InodeFd dirfd = env.pin(parent);
  if (!dirfd) return dirfd.err();
  InodeFd newdirfd = env.pin(newparent);
  if (!newdirfd) return newdirfd.err();
  MutexLock g(t.mu);
  return recording(env, t, "rename", [&]() -> int {
    t.mu.assert_held();  // recording() runs it under t.mu
    // One walk of each name: type, handle and the committed state of the entry.
    UniqueFd sfd(::openat(dirfd.get(), name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!sfd) return sfd.err();
    struct stat sst, dst;
    if (::fstatat(sfd.get(), "", &sst, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return errno;
    UniqueFd dfd(::openat(newdirfd.get(), newname, O_PATH | O_NOFOLLOW | O_CLOEXEC));
    bool target = dfd && ::fstatat(dfd.get(), "", &dst, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0;
    if (target && sst.st_ino == dst.st_ino) return 0;  // two names of one object
    if ((flags & RENAME_NOREPLACE) && target) return EEXIST;
    if ((flags & RENAME_EXCHANGE) && !target) return ENOENT;
    bool displace = target && !(flags & RENAME_EXCHANGE);
    if (displace) {
      if (S_ISDIR(sst.st_mode) && !S_ISDIR(dst.st_mode)) return ENOTDIR;
      if (!S_ISDIR(sst.st_mode) && S_ISDIR(dst.st_mode)) return EISDIR;
      // (EEXIST, as XFS answers a rename onto a non-empty directory; rmdir says ENOTEMPTY)
      if (S_ISDIR(dst.st_mode) && !dir_is_empty(newdirfd.get(), newname)) return EEXIST;
    }
    save_attrs_locked(env, t, parent, dirfd);
    save_attrs_locked(env, t, newparent, newdirfd);
    UndoStep s;
    s.kind = StepKind::Renamed;
    s.obj = backing_id(sfd.get(), sst);
    note_before(env, t, parent, name, sfd.get(), &sst, &s.obj);
    BackingId did;
    if (target) did = backing_id(dfd.get(), dst);
    note_before(env, t, newparent, newname, target ? dfd.get() : -1, &dst, &did);
    // A directory that changes parent has its ".." rewritten, which changes its own
    // times: keep them too (for both sides of an exchange).
    if (S_ISDIR(sst.st_mode)) save_attrs_locked(env, t, sfd.get(), s.obj);
    if ((flags & RENAME_EXCHANGE) && S_ISDIR(dst.st_mode))
      save_attrs_locked(env, t, dfd.get(), did);
    sfd.reset();
    dfd.reset();
    s.dir = id_of(parent);
    s.name = name;
    s.dir2 = id_of(newparent);
    s.name2 = newname;
    s.flags = flags;
    s.displaced = displace;
    // The kernel keeps the lifetime of a dentry it moves. Only names this transaction
    // made in a directory others reach were given none; a name someone looked up before
    // (or one inside a directory this transaction made) may be cached, and must not be
    // found at a place others can reach.
    auto made_here = [&](const Inode &dir, const char *n) REQUIRES(t.mu) {
      auto it = t.entries.find({dir.nodeid, n});
      auto d = t.objects.find(dir.nodeid);
      return it != t.entries.end() && it->second && !(d != t.objects.end() && d->second.created);
    };
    auto reachable = [&](const Inode &dir) REQUIRES(t.mu) {
      auto d = t.objects.find(dir.nodeid);
      return !(d != t.objects.end() && d->second.created);
    };
    *exposed = (reachable(newparent) && !made_here(parent, name)) ||
               ((flags & RENAME_EXCHANGE) && reachable(parent) && !made_here(newparent, newname));
    UndoLog &log = log_of(env, t);
    t.entries[{parent.nodeid, name}] = false;
    t.entries[{newparent.nodeid, newname}] = false;
    if (!displace) {
      log.append(s);
      return ::renameat2(dirfd.get(), name, newdirfd.get(), newname, flags) == 0 ? 0 : errno;
    }
    // The displaced target goes into the log first (kept even when this transaction
    // made it, as in txn_remove); the move then finds its name free.
    uint64_t seq = 0;
    if (int err = log.stash(newdirfd.get(), newname, s, &seq)) return err;
    std::string stash = step_name(seq) + ".d";
    if (::renameat2(dirfd.get(), name, newdirfd.get(), newname,
                    RENAME_NOREPLACE | (flags & RENAME_WHITEOUT)) != 0) {
      int err = errno;
      ::renameat2(log.dir_fd(), stash.c_str(), newdirfd.get(), newname, RENAME_NOREPLACE);
      return err;
    }
    uint64_t victim = env.nodeid_of(dst.st_ino);
    t.unlinked.emplace(victim, Txn::Unlinked{stash, newparent.nodeid, newname});
    if (!S_ISDIR(dst.st_mode)) t.objects[victim].stashed++;
    else t.objects[victim].dir_removed = true;
    return 0;
  });
}

int txn_link(TxnEnv &env, Txn &t, const Inode &obj, const Inode &newparent, const char *newname) {
  InodeFd objfd = env.pin(obj);
  if (!objfd) return objfd.err();
  InodeFd newdirfd = env.pin(newparent);
  if (!newdirfd) return newdirfd.err();
  MutexLock g(t.mu);
  return recording(env, t, "link", [&]() -> int {
    t.mu.assert_held();  // recording() runs it under t.mu
    save_attrs_locked(env, t, newparent, newdirfd);
    // The object's link count changes: others must go on seeing the committed one
    // (the committed view) and the kernel must not cache the new one (changed_shared).
    save_attrs_locked(env, t, obj, objfd);
    note_before(env, t, newparent, newdirfd, newname);
    UndoStep s;
    s.kind = StepKind::Linked;
    s.obj = id_of(obj);
    s.dir = id_of(newparent);
    s.name = newname;
    log_of(env, t).append(s);
    t.entries[{newparent.nodeid, newname}] = false;
    if (::linkat(AT_FDCWD, proc_path(objfd.get()).c_str(), newdirfd.get(), newname,
                 AT_SYMLINK_FOLLOW) != 0)
      return errno;
    return 0;
  });
}

void save_row_name(TxnEnv &env, Txn &t, uint64_t nodeid) {
  auto row = env.db->handle(nodeid);
  if (!row) return;
  MutexLock g(t.mu);
  t.row_names.push_back({nodeid, row->parent, row->name});
}

}  // namespace txnfs
