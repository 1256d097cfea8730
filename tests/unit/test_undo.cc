// The undo log and its executor, on a real XFS with reflink (xfs_image.h; root only).
//
// Every test records changes with the daemon's own recorder (Recording below: undo
// steps first, then the change), undoes them with undo_transaction,
// and compares a snapshot of the tree -- names, contents, sizes, modes, owners,
// atime/mtime, xattrs, link counts, inode numbers; not ctime -- with the one taken
// before the transaction.
#include <dirent.h>
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include <catch2/catch.hpp>

#include "store/backing.h"
#include "store/crash_point.h"
#include "store/error.h"
#include "store/store.h"
#include "recovery/undo/undo_exec.h"
#include "recovery/undo/undo_io.h"
#include "recovery/undo/undo_log.h"
#include "recovery/undo/undo_record.h"
#include "recovery/undo/undo_step.h"
#include "store/unique_fd.h"
#include "sync/mutex.h"
#include "txnfuse/txn/recorder.h"
#include "txnfuse/txn/txn.h"
#include "txnfuse/txn/txn_env.h"
#include "tests/unit/xfs_image.h"

using namespace txnfs;

namespace {

[[noreturn]] void die(const std::string &what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

// Opens `path` or throws.
UniqueFd open_fd(const std::string &path, int flags, mode_t mode = 0) {
  UniqueFd fd(::open(path.c_str(), flags | O_CLOEXEC, mode));
  if (!fd) die("open " + path);
  return fd;
}

// The text of record `seq` of the log `log_fd`, whichever form it is in (undo_record.h).
std::string record_text(int log_fd, uint64_t seq) {
  std::vector<std::string> problems;
  for (auto &rec : read_records(log_fd, problems))
    if (rec.seq == seq) return rec.text;
  throw std::runtime_error("no record " + step_name(seq));
}

std::string parent_of(const std::string &rel) {
  auto slash = rel.rfind('/');
  return slash == std::string::npos ? "" : rel.substr(0, slash);
}
std::string base_of(const std::string &rel) {
  auto slash = rel.rfind('/');
  return slash == std::string::npos ? rel : rel.substr(slash + 1);
}

// ---------------------------------------------------------------- snapshots

struct Node {
  mode_t mode = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  off_t size = 0;
  nlink_t nlink = 0;
  ino_t ino = 0;
  timespec atime{}, mtime{};
  std::string content;  // regular file: its bytes; symlink: its target
  std::map<std::string, std::string> xattrs;
};

using Snapshot = std::map<std::string, Node>;

std::string printable(const std::string &s, size_t max = 40) {
  std::string out;
  for (unsigned char c : s.substr(0, max)) {
    if (c < 0x20 || c >= 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += char(c);
    }
  }
  return s.size() > max ? out + "..." : out;
}

void snap_into(const std::string &root, const std::string &rel, Snapshot &out) {
  std::string path = rel.empty() ? root : root + "/" + rel;
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) die("lstat " + path);
  Node n;
  n.mode = st.st_mode;
  n.uid = st.st_uid;
  n.gid = st.st_gid;
  n.size = st.st_size;
  n.nlink = st.st_nlink;
  n.ino = st.st_ino;
  n.atime = st.st_atim;
  n.mtime = st.st_mtim;
  if (S_ISREG(st.st_mode)) {
    UniqueFd f = open_fd(path, O_RDONLY | O_NOATIME);
    char buf[65536];
    for (ssize_t k; (k = ::read(f.get(), buf, sizeof buf)) > 0;) n.content.append(buf, size_t(k));
  } else if (S_ISLNK(st.st_mode)) {
    char buf[4096];
    ssize_t k = ::readlink(path.c_str(), buf, sizeof buf);
    if (k < 0) die("readlink " + path);
    n.content.assign(buf, size_t(k));
  }
  char names[65536];
  ssize_t k = ::llistxattr(path.c_str(), names, sizeof names);
  if (k < 0) die("llistxattr " + path);
  for (ssize_t i = 0; i < k;) {
    std::string name(names + i);
    i += ssize_t(name.size()) + 1;
    char val[65536];
    ssize_t v = ::lgetxattr(path.c_str(), name.c_str(), val, sizeof val);
    if (v < 0) die("lgetxattr " + path);
    n.xattrs[name].assign(val, size_t(v));
  }
  out[rel.empty() ? "." : rel] = n;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = ::opendir(path.c_str());
    if (!d) die("opendir " + path);
    std::vector<std::string> kids;
    while (dirent *e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) kids.emplace_back(e->d_name);
    ::closedir(d);
    for (const auto &kid : kids) snap_into(root, rel.empty() ? kid : rel + "/" + kid, out);
  }
}

Snapshot snapshot(const std::string &root) {
  Snapshot s;
  snap_into(root, "", s);
  return s;
}

bool same_time(const timespec &a, const timespec &b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

// "" when equal (ctime aside), else one line per difference.
std::string diff(const Snapshot &a, const Snapshot &b) {
  std::ostringstream o;
  for (const auto &[path, n] : a) {
    auto it = b.find(path);
    std::string p = printable(path);
    if (it == b.end()) {
      o << "missing: " << p << "\n";
      continue;
    }
    const Node &m = it->second;
    if (n.mode != m.mode)
      o << p << ": mode " << std::oct << n.mode << " -> " << m.mode << std::dec << "\n";
    if (n.uid != m.uid || n.gid != m.gid)
      o << p << ": owner " << n.uid << ":" << n.gid << " -> " << m.uid << ":" << m.gid << "\n";
    if (n.size != m.size) o << p << ": size " << n.size << " -> " << m.size << "\n";
    if (n.nlink != m.nlink) o << p << ": nlink " << n.nlink << " -> " << m.nlink << "\n";
    if (n.ino != m.ino) o << p << ": ino " << n.ino << " -> " << m.ino << "\n";
    if (!same_time(n.atime, m.atime))
      o << p << ": atime " << n.atime.tv_sec << "." << n.atime.tv_nsec << " -> " << m.atime.tv_sec
        << "." << m.atime.tv_nsec << "\n";
    if (!same_time(n.mtime, m.mtime))
      o << p << ": mtime " << n.mtime.tv_sec << "." << n.mtime.tv_nsec << " -> " << m.mtime.tv_sec
        << "." << m.mtime.tv_nsec << "\n";
    if (n.content != m.content) {
      size_t i = 0;
      while (i < n.content.size() && i < m.content.size() && n.content[i] == m.content[i]) ++i;
      o << p << ": content differs from byte " << i << "\n";
    }
    if (n.xattrs != m.xattrs) o << p << ": xattrs differ\n";
  }
  for (const auto &[path, n] : b)
    if (!a.count(path)) o << "extra: " << printable(path) << "\n";
  return o.str();
}

// ---------------------------------------------------------------- environment

// A file system with a tree and a backups directory, as in a store: a fresh XFS with
// reflink, or (plain) a noatime bind mount of a directory on /tmp's file system.
struct Env {
  std::unique_ptr<XfsImage> xfs;
  std::unique_ptr<NoatimeDir> plain;
  std::string mnt, tree, backups, why;
  int mount_fd = -1, backups_fd = -1;

  explicit Env(bool on_xfs = true) {
    if (on_xfs) {
      xfs = std::make_unique<XfsImage>();
      mnt = xfs->mnt;
      why = xfs->why;
      if (!xfs->ok()) return;
    } else {
      plain = std::make_unique<NoatimeDir>();
      mnt = plain->mnt;
      why = plain->why;
      if (!plain->ok()) return;
    }
    tree = mnt + "/tree";
    backups = mnt + "/backups";
    if (::mkdir(tree.c_str(), 0755) != 0 || ::mkdir(backups.c_str(), 0700) != 0) die("mkdir");
    mount_fd = ::open(tree.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    backups_fd = ::open(backups.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (mount_fd < 0 || backups_fd < 0) die("open");
  }
  ~Env() {
    if (mount_fd >= 0) ::close(mount_fd);
    if (backups_fd >= 0) ::close(backups_fd);
  }
  bool ok() const { return mount_fd >= 0; }
  std::string p(const std::string &rel) const { return rel.empty() ? tree : tree + "/" + rel; }

  UndoResult undo(uint64_t txid, std::function<void(const UndoStep &)> hook = {}) {
    return undo_transaction(UndoContext{mount_fd, backups_fd, std::move(hook)}, txid);
  }
  bool has_log(uint64_t txid) const {
    struct stat st;
    return ::fstatat(backups_fd, std::to_string(txid).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  }
};

#define NEED_FS(env, on_xfs)      \
  Env env(on_xfs);                \
  if (!env.ok()) {                \
    WARN("skipped: " << env.why); \
    return;                       \
  }
#define NEED_XFS(env) NEED_FS(env, true)

struct Crash {};  // thrown by hooks to stop a run part-way, like a power cut

// Drives the daemon's real undo recorder (txnfuse/txn/recorder.h) on the test's tree, the
// way the FUSE handlers do: data and attribute changes are recorded through it and then
// made with a plain syscall; namespace changes (make, remove, rename, link) are made by
// the recorder itself, through the log. Paths are relative to the tree.
struct Recording {
  Env &e;
  NoCache no_cache;
  TxnEnv env;
  std::shared_ptr<txnfs::Txn> t;
  int budget = -1;  // >= 0: throw Crash at that many change points from now

  Recording(Env &en, uint64_t txid, bool reflink = true)
      : e(en), t(std::make_shared<txnfs::Txn>(txid, ::getuid(), ::getpid(), 0)) {
    env.tree_fd = e.mount_fd;
    env.backups_fd = e.backups_fd;
    env.tree_ino = backing_id(e.mount_fd).ino;
    env.reflink = reflink;
    env.cache = &no_cache;
  }

  // The transaction's log (null before its first change).
  UndoLog *log() {
    MutexLock g(t->mu);
    return t->log.get();
  }

  // Before an operation's change (data changes: between its records and the change).
  void point() {
    if (budget >= 0 && budget-- == 0) throw Crash{};
  }

  // The object `rel` names, as the daemon's inode table would hold it.
  InodePtr inode(const std::string &rel) {
    int fd = ::open(e.p(rel).c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || ::fstat(fd, &st) != 0) die("open O_PATH " + rel);
    InodePtr i = make_inode(fd, env.nodeid_of(st.st_ino), st);
    ::close(fd);  // the core pins fds through env.fds, by handle
    return i;
  }
  struct stat lstat_of(const std::string &rel) {
    struct stat st;
    if (::lstat(e.p(rel).c_str(), &st) != 0) die("lstat " + rel);
    return st;
  }
  static void ok(int err, const std::string &what) {
    if (err) throw std::runtime_error(what + ": " + std::strerror(err));
  }

  void write(const std::string &rel, uint64_t off, const std::string &data) {
    ok(save_range(env, *t, *inode(rel), off, data.size()), "save_range " + rel);
    point();
    UniqueFd f = open_fd(e.p(rel), O_WRONLY);
    if (::pwrite(f.get(), data.data(), data.size(), off_t(off)) != ssize_t(data.size()))
      die("pwrite");
  }
  void truncate(const std::string &rel, uint64_t size) {
    ok(save_truncate(env, *t, *inode(rel), size), "save_truncate " + rel);
    point();
    if (::truncate(e.p(rel).c_str(), off_t(size)) != 0) die("truncate");
  }
  void chmod(const std::string &rel, mode_t mode) {
    ok(save_attrs(env, *t, *inode(rel)), "save_attrs " + rel);
    point();
    if (::chmod(e.p(rel).c_str(), mode) != 0) die("chmod");
  }
  void chown(const std::string &rel, uid_t uid, gid_t gid) {
    ok(save_attrs(env, *t, *inode(rel)), "save_attrs " + rel);
    point();
    if (::lchown(e.p(rel).c_str(), uid, gid) != 0) die("lchown");
  }
  void utimes(const std::string &rel, timespec atime, timespec mtime) {
    ok(save_attrs(env, *t, *inode(rel)), "save_attrs " + rel);
    point();
    timespec ts[2] = {atime, mtime};
    if (::utimensat(AT_FDCWD, e.p(rel).c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0) die("utimensat");
  }
  void setx(const std::string &rel, const std::string &name, const std::string &value) {
    ok(save_xattrs(env, *t, *inode(rel)), "save_xattrs " + rel);
    point();
    if (::lsetxattr(e.p(rel).c_str(), name.c_str(), value.data(), value.size(), 0) != 0)
      die("lsetxattr " + name);
  }
  void rmx(const std::string &rel, const std::string &name) {
    ok(save_xattrs(env, *t, *inode(rel)), "save_xattrs " + rel);
    point();
    if (::lremovexattr(e.p(rel).c_str(), name.c_str()) != 0) die("lremovexattr " + name);
  }

  // kind: 'f' file, 'd' directory, 'l' symlink (to `target`), 'p' fifo.
  void make(const std::string &rel, char kind, mode_t mode = 0644,
            const std::string &target = "t") {
    point();
    mode_t type = kind == 'f' ? S_IFREG : kind == 'd' ? S_IFDIR : kind == 'l' ? S_IFLNK : S_IFIFO;
    auto mk = [&](int dirfd, const char *tmp) -> int {
      int rc = kind == 'f'
                   ? ::close(::openat(dirfd, tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, mode))
               : kind == 'd' ? ::mkdirat(dirfd, tmp, mode)
               : kind == 'l' ? ::symlinkat(target.c_str(), dirfd, tmp)
                             : ::mkfifoat(dirfd, tmp, mode);
      return rc == 0 ? 0 : errno;
    };
    ok(txn_make(env, *t, *inode(parent_of(rel)), base_of(rel).c_str(),
                type | (kind == 'l' ? 0777 : mode), mk),
       "txn_make " + rel);
  }
  void remove(const std::string &rel) {
    point();
    bool dir = S_ISDIR(lstat_of(rel).st_mode);
    ok(txn_remove(env, *t, *inode(parent_of(rel)), base_of(rel).c_str(), dir), "txn_remove " + rel);
  }
  void rename(const std::string &from, const std::string &to, unsigned flags = 0) {
    point();
    bool exposed;
    ok(txn_rename(env, *t, *inode(parent_of(from)), base_of(from).c_str(), *inode(parent_of(to)),
                  base_of(to).c_str(), flags, &exposed),
       "txn_rename " + from + " " + to);
  }
  void link(const std::string &from, const std::string &to) {
    point();
    ok(txn_link(env, *t, *inode(from), *inode(parent_of(to)), base_of(to).c_str()),
       "txn_link " + from + " " + to);
  }
};

// ---------------------------------------------------------------- trees

std::string pattern(size_t n, unsigned seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (auto &c : s) c = char(rng());
  return s;
}

void put_file(const std::string &path, const std::string &data, mode_t mode = 0644) {
  UniqueFd f = open_fd(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  if (::write(f.get(), data.data(), data.size()) != ssize_t(data.size())) die("write " + path);
}

// Gives every object under `root` its own atime/mtime (children before parents, so
// making the children does not move them), far from "now".
void settle_times(const std::string &root) {
  Snapshot s = snapshot(root);
  long i = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    std::string path = it->first == "." ? root : root + "/" + it->first;
    ++i;
    timespec ts[2] = {{1'000'000'000 + i * 11, 100 + i}, {900'000'000 + i * 7, 999'999'000 + i}};
    if (::utimensat(AT_FDCWD, path.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0) die("utimensat " + path);
  }
  // Paths sorted descending put "a/b" before "a", but not every child before its
  // parent ("a b" < "a/b"): a second pass over directories fixes their times.
  for (auto it = s.rbegin(); it != s.rend(); ++it)
    if (S_ISDIR(it->second.mode)) {
      std::string path = it->first == "." ? root : root + "/" + it->first;
      timespec ts[2] = {{1'100'000'000, 5}, {1'050'000'000 + long(it->first.size()), 7}};
      if (::utimensat(AT_FDCWD, path.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0) die("utimensat");
    }
}

// A small tree under e.tree/<rel>: files of odd sizes, a hard link, a symlink, a fifo,
// nested and empty directories, xattrs, odd owners and modes, a name with a newline.
void build_tree(Env &e, const std::string &rel) {
  std::string r = e.p(rel);
  if (::mkdir(r.c_str(), 0755) != 0) die("mkdir " + r);
  put_file(r + "/small", "hello, world\n");
  put_file(r + "/big", pattern(300'000, 1));
  put_file(r + "/aligned", pattern(3 * 4096, 2));
  put_file(r + "/empty", "");
  put_file(r + "/suid", pattern(5000, 3), 0755);
  ::chmod((r + "/suid").c_str(), 04755);
  ::chown((r + "/suid").c_str(), 1000, 1000);
  ::chmod((r + "/suid").c_str(), 06755);  // chown cleared the bits
  ::mkdir((r + "/d").c_str(), 0750);
  ::mkdir((r + "/d/sub").c_str(), 0700);
  ::mkdir((r + "/empty-dir").c_str(), 0755);
  put_file(r + "/d/inner", pattern(12345, 4));
  put_file(r + "/d/sub/deep", pattern(70'000, 5));
  put_file(r + "/odd name\nwith newline \xff", "odd\n");
  if (::link((r + "/small").c_str(), (r + "/d/small-link").c_str()) != 0) die("link");
  if (::symlink("../small", (r + "/d/sym").c_str()) != 0) die("symlink");
  if (::lchown((r + "/d/sym").c_str(), 7, 8) != 0) die("lchown");
  if (::mkfifo((r + "/fifo").c_str(), 0640) != 0) die("mkfifo");
  ::setxattr((r + "/small").c_str(), "user.colour", "blue", 4, 0);
  ::setxattr((r + "/small").c_str(), "trusted.secret", "\x00\x01\x02", 3, 0);
  ::setxattr((r + "/d").c_str(), "user.dirattr", "x", 1, 0);
  ::lsetxattr((r + "/d/sym").c_str(), "trusted.link", "L", 1, 0);
  settle_times(r);
}

// Builds a tree, runs `ops` in transaction `txid`, checks the tree changed, undoes,
// and checks it is back. Returns the undo result.
// `setup` (optional) adds to the tree first, given its absolute path.
using Ops = std::function<void(Recording &, const std::string &)>;
UndoResult round_trip(Env &e, uint64_t txid, const Ops &ops, bool reflink = true,
                      const std::function<void(const std::string &)> &setup = {}) {
  std::string rel = "t" + std::to_string(txid);
  build_tree(e, rel);
  if (setup) {
    setup(e.p(rel));
    settle_times(e.p(rel));
  }
  Snapshot before = snapshot(e.p(rel));
  {
    Recording t(e, txid, reflink);
    ops(t, rel);
  }
  CHECK(diff(before, snapshot(e.p(rel))) != "");  // the transaction did something
  UndoResult r = e.undo(txid);
  CHECK(r.problems.empty());
  INFO("after undo of " << txid);
  CHECK(diff(before, snapshot(e.p(rel))) == "");
  CHECK(!e.has_log(txid));
  return r;
}

BackingId fake_id(uint64_t ino, uint32_t gen) {
  BackingId b;
  b.ino = ino;
  b.generation = gen;
  int32_t type = 0x81;
  b.fh.assign(reinterpret_cast<const char *>(&type), 4);
  b.fh.append(reinterpret_cast<const char *>(&ino), 8);
  b.fh.append(reinterpret_cast<const char *>(&gen), 4);
  return b;
}

bool same_id(const BackingId &a, const BackingId &b) {
  return a.ino == b.ino && a.generation == b.generation && a.fh == b.fh;
}

bool same_step(const UndoStep &a, const UndoStep &b) {
  if (a.kind != b.kind || a.seq != b.seq || !same_id(a.obj, b.obj)) return false;
  switch (a.kind) {
    case StepKind::Attrs:
      return a.mode == b.mode && a.uid == b.uid && a.gid == b.gid && a.size == b.size &&
             same_time(a.atime, b.atime) && same_time(a.mtime, b.mtime);
    case StepKind::Data:
      return a.off == b.off && a.len == b.len;
    case StepKind::Created:
    case StepKind::Removed:
      return same_id(a.dir, b.dir) && a.name == b.name && a.flags == b.flags;
    case StepKind::Linked:
      return same_id(a.dir, b.dir) && a.name == b.name;
    case StepKind::Renamed:
      return same_id(a.dir, b.dir) && a.name == b.name && same_id(a.dir2, b.dir2) &&
             a.name2 == b.name2 && a.flags == b.flags && a.displaced == b.displaced;
    case StepKind::Xattrs:
      return true;
    case StepKind::Made:
      return a.name == b.name && a.flags == b.flags;
  }
  return false;
}

std::vector<UndoStep> sample_steps(const std::string &n1, const std::string &n2) {
  std::vector<UndoStep> v;
  UndoStep s;
  s.obj = fake_id(UINT64_MAX, UINT32_MAX);
  s.seq = 1;
  s.kind = StepKind::Attrs;
  s.mode = 0104755;
  s.uid = 4294967294u;
  s.gid = 0;
  s.size = UINT64_MAX;
  s.atime = {-5, 999'999'999};
  s.mtime = {1'700'000'000, 0};
  v.push_back(s);
  s = {};
  s.obj = fake_id(131, 7);
  s.seq = 2;
  s.kind = StepKind::Data;
  s.off = 4096;
  s.len = 123457;
  v.push_back(s);
  for (StepKind k : {StepKind::Created, StepKind::Removed, StepKind::Linked}) {
    s = {};
    s.kind = k;
    s.seq = v.size() + 1;
    s.obj = fake_id(99, 3);
    s.dir = fake_id(128, 1);
    s.name = n1;
    s.flags = k == StepKind::Linked ? 0 : 1;
    v.push_back(s);
  }
  s = {};
  s.kind = StepKind::Renamed;
  s.seq = UINT64_MAX;
  s.obj = fake_id(UINT64_MAX, UINT32_MAX);
  s.dir = fake_id(UINT64_MAX - 1, UINT32_MAX);
  s.dir2 = fake_id(UINT64_MAX - 2, UINT32_MAX);
  s.name = n1;
  s.name2 = n2;
  s.flags = RENAME_EXCHANGE;
  s.displaced = true;
  v.push_back(s);
  s = {};
  s.kind = StepKind::Xattrs;
  s.seq = 77;
  s.obj = fake_id(5, 5);
  v.push_back(s);
  s = {};
  s.kind = StepKind::Made;
  s.seq = 78;
  s.obj = fake_id(128, 1);
  s.name = n2;
  s.flags = 1;
  v.push_back(s);
  return v;
}

uint32_t fnv1a(const std::string &s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}
// A record body with a correct checksum, to test the parser behind the checksum.
std::string forge(const std::string &body) {
  char sum[16];
  std::snprintf(sum, sizeof sum, " #%08x", fnv1a(body));
  return body + sum;
}

// All extents of fd, and whether each is shared (FIEMAP).
std::vector<std::pair<uint64_t, bool>> extents(int fd) {
  std::vector<char> buf(sizeof(fiemap) + 64 * sizeof(fiemap_extent));
  auto *fm = reinterpret_cast<fiemap *>(buf.data());
  fm->fm_start = 0;
  fm->fm_length = FIEMAP_MAX_OFFSET;
  fm->fm_flags = FIEMAP_FLAG_SYNC;
  fm->fm_extent_count = 64;
  if (::ioctl(fd, FS_IOC_FIEMAP, fm) != 0) die("FIEMAP");
  std::vector<std::pair<uint64_t, bool>> out;
  for (unsigned i = 0; i < fm->fm_mapped_extents; ++i)
    out.emplace_back(fm->fm_extents[i].fe_logical,
                     (fm->fm_extents[i].fe_flags & FIEMAP_EXTENT_SHARED) != 0);
  return out;
}

// Copies the data object `dn` of the log `from` into the log `to` (a clone of a file,
// or an empty directory) with its xattrs; false when `from` has none.
bool copy_data_object(int from, int to, const std::string &dn) {
  struct stat st;
  if (::fstatat(from, dn.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return false;
  if (S_ISDIR(st.st_mode) && ::mkdirat(to, dn.c_str(), 0700) != 0) die("mkdirat");
  UniqueFd src(::openat(from, dn.c_str(), O_RDONLY | O_CLOEXEC));
  int how = S_ISDIR(st.st_mode) ? O_RDONLY : O_WRONLY | O_CREAT | O_EXCL;
  UniqueFd dst(::openat(to, dn.c_str(), how, 0600));
  if (!src || !dst) die("open " + dn);
  if (!S_ISDIR(st.st_mode) && ::ioctl(dst.get(), FICLONE, src.get()) != 0) die("FICLONE");
  char xn[65536], xv[65536];
  ssize_t len = ::flistxattr(src.get(), xn, sizeof xn);
  for (ssize_t i = 0; i < len; i += ssize_t(std::strlen(xn + i)) + 1) {
    ssize_t v = ::fgetxattr(src.get(), xn + i, xv, sizeof xv);
    if (v < 0 || ::fsetxattr(dst.get(), xn + i, xv, size_t(v), 0) != 0) die("copy xattr");
  }
  return true;
}

// Copies the parts of log `txid` that outlive its undo -- records, range clones and
// xattr snapshots (stashed and created objects are back in the tree, or gone, by the
// time the log is removed) -- to `side`, a directory on the same file system.
void save_log(Env &e, uint64_t txid, const std::string &side) {
  if (::mkdir(side.c_str(), 0700) != 0) die("mkdir " + side);
  UniqueFd log = open_fd(e.backups + "/" + std::to_string(txid), O_RDONLY | O_DIRECTORY);
  UniqueFd out = open_fd(side, O_RDONLY | O_DIRECTORY);
  std::vector<std::string> problems;
  for (const auto &rec : read_records(log.get(), problems)) {
    if (put_record_text(out.get(), rec.seq, rec.text, true) != 0) die("copy record");
    StepKind kind = decode_step(rec.text).kind;
    if (kind != StepKind::Data && kind != StepKind::Xattrs) continue;
    if (!copy_data_object(log.get(), out.get(), step_name(rec.seq) + ".d"))
      die("stat " + step_name(rec.seq) + ".d");
  }
  if (!problems.empty()) throw std::runtime_error("save_log: " + problems[0]);
}

// Makes backups/<txid> from `side`, with the records whose seq is at most `max_seq`
// (and their data objects): a log whose removal stopped part-way.
// Only the records an undo leaves behind: it retires each namespace step (Created, Made,
// Linked, Removed, Renamed) right after undoing it (undo_exec.cc, Executor::run).
uint64_t restore_log(Env &e, const std::string &side, uint64_t txid, uint64_t max_seq) {
  uint64_t restored = 0;
  std::string dir = e.backups + "/" + std::to_string(txid);
  if (::mkdir(dir.c_str(), 0700) != 0) die("mkdir " + dir);
  UniqueFd from = open_fd(side, O_RDONLY | O_DIRECTORY);
  UniqueFd to = open_fd(dir, O_RDONLY | O_DIRECTORY);
  std::vector<std::string> problems;
  for (const auto &rec : read_records(from.get(), problems)) {
    if (rec.seq > max_seq) continue;
    StepKind kind = decode_step(rec.text).kind;
    if (kind != StepKind::Attrs && kind != StepKind::Data && kind != StepKind::Xattrs) continue;
    // Both forms a log may hold (undo_record.h): odd seqs as symlinks, even as xattrs.
    if (put_record_text(to.get(), rec.seq, rec.text, rec.seq % 2 == 0) != 0) die("copy record");
    restored++;
    copy_data_object(from.get(), to.get(), step_name(rec.seq) + ".d");  // (none: fine)
  }
  if (!problems.empty()) throw std::runtime_error("restore_log: " + problems[0]);
  return restored;
}

}  // namespace

// ================================================================ encoding

TEST_CASE("undo records round-trip every kind, also with nasty names") {
  std::string n255(255, 'x');
  n255[0] = ' ';
  n255[100] = '\n';
  n255[254] = '\xff';
  std::vector<std::pair<std::string, std::string>> names = {
      {"plain", "other"},
      {"with space", " leading and trailing "},
      {"new\nline", "\r\t\x01\x7f"},
      {"\xff\xfe high bytes \x80", "#1 A 2"},
      {"...", "-"},
      {"5:fake", "9999999999999999999999:x"},
      {n255, n255},
  };
  for (const auto &[a, b] : names) {
    for (const UndoStep &s : sample_steps(a, b)) {
      std::string text = encode_step(s);
      INFO(printable(text, 200));
      CHECK(text.size() <= kMaxEncoded);
      CHECK(text.find('\0') == std::string::npos);
      CHECK(text.rfind("1 ", 0) == 0);
      CHECK(same_step(decode_step(text), s));
    }
  }
  // The longest record: a Renamed with two 255-byte names and the largest numbers.
  UndoStep longest = sample_steps(n255, n255).at(5);
  longest.flags = UINT32_MAX;
  CHECK(encode_step(longest).size() == 762);
  CHECK(step_name(7) == "0000000000000007");
  CHECK(step_name(UINT64_MAX) == "ffffffffffffffff");
}

TEST_CASE("encoding refuses steps that cannot be recorded") {
  UndoStep s = sample_steps("a", "b").at(2);  // Created
  for (std::string bad : {std::string(), std::string("."), std::string(".."), std::string("a/b"),
                          std::string("a\0b", 3), std::string(256, 'x')}) {
    s.name = bad;
    CHECK_THROWS_AS(encode_step(s), Error);
  }
  s.name = "ok";
  s.dir.fh.clear();
  CHECK_THROWS_AS(encode_step(s), Error);
  s.dir = fake_id(1, 2);
  s.dir.ino = 3;  // disagrees with the handle
  CHECK_THROWS_AS(encode_step(s), Error);
  UndoStep a = sample_steps("a", "b").at(0);
  a.atime.tv_nsec = 1'000'000'000;
  CHECK_THROWS_AS(encode_step(a), Error);
}

TEST_CASE("damaged records are rejected: truncated, changed, forged garbage") {
  for (const UndoStep &s : sample_steps("a name\nx", "b")) {
    std::string text = encode_step(s);
    INFO(printable(text, 200));
    for (size_t n = 0; n < text.size(); ++n) CHECK_THROWS_AS(decode_step(text.substr(0, n)), Error);
    for (size_t i = 0; i < text.size(); ++i)
      for (unsigned char delta : {1, 0x20, 0x80}) {
        std::string t = text;
        t[i] = char(t[i] ^ delta);
        if (t[i] == '\0') continue;
        CHECK_THROWS_AS(decode_step(t), Error);
      }
    CHECK_THROWS_AS(decode_step(text + " "), Error);
    CHECK_THROWS_AS(decode_step(text + "0"), Error);
  }
  // Behind a correct checksum the parser still checks every field.
  std::string id = "131:7:" + [] {
    std::string h;
    for (unsigned char c : fake_id(131, 7).fh) {
      char b[3];
      std::snprintf(b, sizeof b, "%02x", c);
      h += b;
    }
    return h;
  }();
  CHECK(decode_step(forge("1 D 5 " + id + " 0 4096")).len == 4096);  // the helper is right
  CHECK(decode_step(forge("1 X 5 " + id)).kind == StepKind::Xattrs);
  for (const std::string &bad : std::vector<std::string>{
           "2 D 5 " + id + " 0 4096",                      // unknown version
           "1 Q 5 " + id + " 0 4096",                      // unknown kind
           "1 D -5 " + id + " 0 4096",                     // negative seq
           "1 D 5 " + id + " 0x10 4096",                   // not decimal
           "1 D 5 " + id + " 0 99999999999999999999",      // out of range
           "1 D 5 " + id + " 18446744073709551615 1",      // range overflows
           "1 D 5 " + id + " 0",                           // field missing
           "1 D 5 " + id + " 0 4096 7",                    // trailing field
           "1 D 5 " + id + "  0 4096",                     // double space
           "1 D 5 132:7:" + id.substr(6) + " 0 4096",      // ino disagrees with the handle
           "1 D 5 131:7:81000000 0 4096",                  // handle too short
           "1 D 5 131:7:" + id.substr(6, 31) + " 0 4096",  // odd hex digits
           "1 D 5 131:7:" + std::string(id.substr(6)).replace(8, 1, "A") + " 0 4096",  // upper case
           "1 L 5 " + id + " " + id + " 3:a/b",    // '/' in a name
           "1 L 5 " + id + " " + id + " 1:.",      // "."
           "1 L 5 " + id + " " + id + " 0:",       // empty name
           "1 L 5 " + id + " " + id + " 9:short",  // name longer than the record
           "1 L 5 " + id + " " + id + " 256:" + std::string(256, 'n'),  // over NAME_MAX
           "1 N 5 " + id + " " + id + " 1:a " + id + " 1:b 0 2",        // displaced not 0/1
           "1 A 5 " + id + " 100644 0 0 1 1.5 2.000000000",             // short nanoseconds
           "1 A 5 " + id + " 100648 0 0 1 1.000000000 2.000000000",     // 8 is not octal
       }) {
    INFO(printable(bad, 200));
    CHECK_THROWS_AS(decode_step(forge(bad)), Error);
  }
  CHECK_THROWS_AS(decode_step(""), Error);
  CHECK_THROWS_AS(decode_step("1 D 5 " + id + " 0 4096 #00000000"), Error);
}

// ================================================================ one kind at a time

TEST_CASE("Attrs: mode, set-ID bits, owner, size, times of files, dirs and symlinks") {
  NEED_XFS(e);
  round_trip(e, 1, [](Recording &t, const std::string &r) {
    t.chmod(r + "/small", 0600);
    t.chown(r + "/suid", 0, 0);  // clears set-ID bits; undo must put them back
    t.chown(r + "/d/sym", 1, 2);
    t.utimes(r + "/d/sym", {5, 5}, {6, 6});
    t.utimes(r + "/d", {1, 2}, {3, 4});
    t.chmod(r + "/d", 0777);
    t.chown(r + "/fifo", 3, 3);
    t.chmod(r + "/fifo", 0);
    t.truncate(r + "/big", 1000);
    t.truncate(r + "/empty", 1 << 20);  // grows: nothing to back up, size undoes it
  });
}

TEST_CASE("file capabilities survive the truncate, restore and chown of later undo steps") {
  NEED_XFS(e);
  // v2 file capability: cap_net_raw permitted, set before the transaction. The chmod
  // records Attrs first, so the Xattrs snapshot (taken before the write) has a higher
  // seq: its undo puts the capability back before the Data and Attrs undos, whose
  // clone, truncate and chown would drop it again.
  const unsigned char cap[20] = {0, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  round_trip(
      e, 1,
      [&](Recording &t, const std::string &r) {
        t.chmod(r + "/aligned", 0700);
        t.write(r + "/aligned", 10, "x");
        t.write(r + "/aligned", 12288, pattern(5000, 1));
        t.chown(r + "/aligned", 1234, 1234);
      },
      true,
      [&](const std::string &root) {
        std::string f = root + "/aligned";
        REQUIRE(::setxattr(f.c_str(), "security.capability", cap, sizeof cap, 0) == 0);
      });
}

TEST_CASE("Data: in-place writes, aligned and not, and extending ones") {
  NEED_XFS(e);
  UndoResult r = round_trip(e, 1, [](Recording &t, const std::string &r) {
    t.write(r + "/big", 0, "head");
    t.write(r + "/big", 4095, "across a block boundary");
    t.write(r + "/big", 8192, pattern(8192, 9));     // exactly aligned
    t.write(r + "/big", 299'990, pattern(100, 10));  // over EOF (tail block)
    t.write(r + "/small", 2, "LLO");
    t.write(r + "/aligned", 12288, "appended at EOF");  // nothing to back up
    t.write(r + "/d/inner", 50'000, "beyond EOF, leaves a hole");
    t.write(r + "/empty", 0, "was empty");
  });
  CHECK(r.bytes_restored > 0);
}

TEST_CASE("Data: the backup is a sparse clone at the same offsets, sharing extents") {
  NEED_XFS(e);
  std::string f = e.p("f");
  put_file(f, pattern(10 * 4096 + 100, 1));
  UniqueFd fd = open_fd(f, O_RDONLY);
  REQUIRE(::fsync(fd.get()) == 0);
  auto log = UndoLog::create(e.backups_fd, 9, true);
  UndoStep s;
  s.kind = StepKind::Data;
  s.obj = backing_id(fd.get());
  s.off = 5000;
  s.len = 3000;  // [5000, 8000) -> blocks [4096, 8192)
  uint64_t seq = log->backup_range(fd.get(), s);
  REQUIRE(seq > 0);
  CHECK(log->backup_bytes() == 4096);
  s.off = 9 * 4096 + 7;
  s.len = 1 << 20;  // to EOF: the unaligned tail block
  uint64_t seq2 = log->backup_range(fd.get(), s);
  CHECK(log->backup_bytes() == 4096 + 4096 + 100);
  s.off = 10 * 4096 + 100;
  s.len = 10;
  CHECK(log->backup_range(fd.get(), s) == 0);  // at EOF: nothing
  s.len = 0;
  s.off = 0;
  CHECK(log->backup_range(fd.get(), s) == 0);
  CHECK(log->steps() == 2);

  UniqueFd d1(::openat(log->dir_fd(), (step_name(seq) + ".d").c_str(), O_RDONLY | O_CLOEXEC));
  REQUIRE(d1);
  struct stat st;
  ::fstat(d1.get(), &st);
  CHECK(st.st_size == 8192);
  CHECK(st.st_blocks == 4096 / 512);  // one block: a hole before it
  auto ex = extents(d1.get());
  REQUIRE(ex.size() == 1);
  CHECK(ex[0].first == 4096);
  CHECK(ex[0].second);  // shared with the original: a clone, not a copy
  UniqueFd d2(::openat(log->dir_fd(), (step_name(seq2) + ".d").c_str(), O_RDONLY | O_CLOEXEC));
  ::fstat(d2.get(), &st);
  CHECK(st.st_size == 10 * 4096 + 100);

  UndoStep back = decode_step(record_text(log->dir_fd(), seq));
  CHECK(back.off == 4096);
  CHECK(back.len == 4096);
  discard_log(UndoContext{e.mount_fd, e.backups_fd, {}}, 9);
  CHECK(!e.has_log(9));
}

TEST_CASE("Data: copy mode (no reflink) backs up and restores the same") {
  NEED_XFS(e);
  round_trip(
      e, 1,
      [](Recording &t, const std::string &r) {
        t.write(r + "/big", 1, pattern(70'000, 3));
        t.write(r + "/small", 0, "x");
        t.truncate(r + "/d/sub/deep", 3);
        t.write(r + "/d/sub/deep", 100'000, "regrown");
      },
      false);
}

TEST_CASE("Created: files, directories, symlinks, fifos, nested") {
  NEED_XFS(e);
  UndoResult r = round_trip(e, 1, [](Recording &t, const std::string &r) {
    t.make(r + "/new", 'f');
    t.write(r + "/new", 0, "data of a new file");
    t.make(r + "/nd", 'd', 0700);
    t.make(r + "/nd/inner", 'f', 0600);
    t.make(r + "/nd/deeper", 'd');
    t.make(r + "/nd/deeper/l", 'l', 0, "/etc/passwd");
    t.make(r + "/d/p", 'p', 0600);
    t.make(r + "/d/sub/new \n name", 'f');
  });
  CHECK(r.removed.size() == 7);
}

TEST_CASE("Linked: new names of existing objects go") {
  NEED_XFS(e);
  round_trip(e, 1, [](Recording &t, const std::string &r) {
    t.link(r + "/small", r + "/third-name");
    t.link(r + "/big", r + "/d/sub/big-link");
    t.link(r + "/d/sym", r + "/sym-link");
  });
}

TEST_CASE("Removed: files, hard-linked files, symlinks, empty dirs come back with their inodes") {
  NEED_XFS(e);
  round_trip(e, 1, [](Recording &t, const std::string &r) {
    t.remove(r + "/big");
    t.remove(r + "/small");  // one of two links
    t.remove(r + "/d/sym");
    t.remove(r + "/fifo");
    t.remove(r + "/empty-dir");
    t.remove(r + "/d/sub/deep");
    t.remove(r + "/d/sub");
    t.remove(r + "/odd name\nwith newline \xff");
  });
}

TEST_CASE("Renamed: within and across directories, over files and empty dirs, exchange") {
  NEED_XFS(e);
  round_trip(e, 1, [](Recording &t, const std::string &r) {
    t.rename(r + "/small", r + "/small2");
    t.rename(r + "/small2", r + "/d/sub/small3");  // twice
    t.rename(r + "/big", r + "/aligned");          // over a file
    t.rename(r + "/d/sub", r + "/empty-dir");      // a dir over an empty dir
    t.rename(r + "/d/inner", r + "/suid", RENAME_EXCHANGE);
    t.rename(r + "/d", r + "/moved-d");  // a dir, keeping its children
    t.rename(r + "/fifo", r + "/moved-d/fifo", RENAME_NOREPLACE);
  });
}

TEST_CASE("Xattrs: set, change, remove; on files, dirs (with ACLs) and symlinks") {
  NEED_XFS(e);
  // A default ACL (a directory-only xattr) and an access ACL, set before the transaction.
  const unsigned char acl[] = {2,    0, 0, 0,                           // version
                               1,    0, 6, 0, 0xff, 0xff, 0xff, 0xff,   // USER_OBJ rw-
                               2,    0, 4, 0, 0xe8, 3,    0,    0,      // USER 1000 r--
                               4,    0, 4, 0, 0xff, 0xff, 0xff, 0xff,   // GROUP_OBJ r--
                               0x10, 0, 4, 0, 0xff, 0xff, 0xff, 0xff,   // MASK r--
                               0x20, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};  // OTHER ---
  auto setup = [&](const std::string &root) {
    std::string d = root + "/d", big = root + "/big";
    REQUIRE(::setxattr(d.c_str(), "system.posix_acl_default", acl, sizeof acl, 0) == 0);
    REQUIRE(::setxattr(big.c_str(), "system.posix_acl_access", acl, sizeof acl, 0) == 0);
  };
  round_trip(
      e, 1,
      [&](Recording &t, const std::string &r) {
        t.setx(r + "/small", "user.colour", "red");
        t.setx(r + "/small", "user.new", std::string(3000, 'v'));
        t.rmx(r + "/small", "trusted.secret");
        t.setx(r + "/d", "user.dirattr", "changed");
        t.rmx(r + "/d", "system.posix_acl_default");
        t.rmx(r + "/big", "system.posix_acl_access");
        t.setx(r + "/d/sym", "trusted.link", "changed");
        t.setx(r + "/d/sym", "trusted.more", "");
        t.setx(r + "/empty-dir", "trusted.x", "y");
      },
      true, setup);
}

// ================================================================ sequences

void mixed(Recording &t, const std::string &r) {
  t.make(r + "/nd", 'd', 0755);
  t.make(r + "/nd/file", 'f', 0644);
  t.write(r + "/nd/file", 0, pattern(9000, 7));
  // A tree made inside the made directory (in place, no steps of its own): a hard link
  // and a removal inside it, and a committed object moved into it (undo moves it out
  // before it removes the directory).
  t.make(r + "/nd/n2", 'd', 0700);
  t.make(r + "/nd/n2/g", 'f', 0600);
  t.write(r + "/nd/n2/g", 0, pattern(3000, 12));
  t.link(r + "/nd/n2/g", r + "/nd/n2/g2");
  t.remove(r + "/nd/n2/g");
  t.make(r + "/nd/n2/g", 'd', 0755);  // a name undo must find free again: recorded
  t.make(r + "/nd/n2/l", 'l');
  t.rename(r + "/nd/n2/l", r + "/nd/n2/l2");
  t.make(r + "/nd/n2/l", 'f');  // the same
  t.rename(r + "/fifo", r + "/nd/n2/fifo");
  t.write(r + "/big", 12345, pattern(5000, 8));
  t.rename(r + "/nd/file", r + "/small");  // over an existing, hard-linked file
  t.remove(r + "/d/inner");
  t.setx(r + "/aligned", "user.k", "v");
  t.truncate(r + "/aligned", 100);
  t.write(r + "/aligned", 50'000, "regrown past a hole");
  t.chmod(r + "/suid", 0644);
  t.link(r + "/big", r + "/nd/big-link");
  t.utimes(r + "/big", {1, 1}, {2, 2});
  t.rename(r + "/d", r + "/nd/d");
  t.remove(r + "/nd/d/sub/deep");
  t.remove(r + "/nd/d/sub");
  t.make(r + "/nd/d/sub", 'f');  // a new object under a removed name
  t.rename(r + "/empty", r + "/nd/d/sym", RENAME_EXCHANGE);
  t.chown(r + "/nd/d/sym", 5, 5);
  t.truncate(r + "/big", 0);
  t.write(r + "/big", 3, pattern(20'000, 11));
  t.remove(r + "/nd/big-link");
}

TEST_CASE("a mixed transaction is undone completely") {
  NEED_XFS(e);
  UndoResult r = round_trip(e, 1, mixed);
  CHECK(r.undone > 0);
  CHECK(r.undone <= r.steps);
  CHECK(!r.touched.empty());
}

TEST_CASE("random unaligned writes, truncations to 0 and regrowth") {
  NEED_XFS(e);
  for (bool reflink : {true, false}) {
    for (unsigned seed = 1; seed <= 6; ++seed) {
      uint64_t txid = seed + (reflink ? 0 : 100);
      round_trip(
          e, txid,
          [seed](Recording &t, const std::string &r) {
            std::mt19937_64 rng(seed);
            std::string f = r + "/big";
            for (int i = 0; i < 40; ++i) {
              struct stat st = t.lstat_of(f);
              uint64_t size = uint64_t(st.st_size);
              switch (rng() % 8) {
                case 0:
                  t.truncate(f, size ? rng() % size : 0);
                  break;
                case 1:
                  t.truncate(f, 0);
                  break;
                case 2:
                  t.truncate(f, size + rng() % 20000);
                  break;
                default: {
                  uint64_t off = rng() % (size + 10000);
                  t.write(f, off, pattern(1 + rng() % 30000, unsigned(rng())));
                }
              }
            }
          },
          reflink);
    }
  }
}

TEST_CASE("an undo interrupted after any number of steps finishes on the next run") {
  NEED_XFS(e);
  // How many steps the mixed transaction records.
  uint64_t n;
  {
    build_tree(e, "probe");
    Recording t(e, 1000);
    mixed(t, "probe");
    n = t.log()->steps();
    e.undo(1000);
  }
  REQUIRE(n > 20);
  for (uint64_t k = 0; k <= n; ++k) {
    INFO("interrupted after " << k << " of " << n << " steps");
    std::string rel = "k" + std::to_string(k);
    build_tree(e, rel);
    Snapshot before = snapshot(e.p(rel));
    {
      Recording t(e, k + 1);
      mixed(t, rel);
    }
    uint64_t calls = 0;
    auto crash_at = [&](uint64_t at) {
      calls = 0;
      return [&calls, at](const UndoStep &) {
        if (calls++ == at) throw Crash{};
      };
    };
    if (k < n) {
      CHECK_THROWS_AS(e.undo(k + 1, crash_at(k)), Crash);
      CHECK(e.has_log(k + 1));
      // A second interruption, earlier than the first, changes nothing either (when
      // that many steps are left: the namespace steps undone so far were retired).
      uint64_t left = 0;
      for (auto &d : undo_io::list_dir(
               open_fd(e.backups + "/" + std::to_string(k + 1), O_RDONLY | O_DIRECTORY).get()))
        left += d.name.size() == 16;
      if (k / 2 < left) CHECK_THROWS_AS(e.undo(k + 1, crash_at(k / 2)), Crash);
    }
    UndoResult r = e.undo(k + 1);
    CHECK(r.problems.empty());
    // (namespace steps undone before an interruption were retired with it)
    CHECK(r.steps <= n);
    CHECK(diff(before, snapshot(e.p(rel))) == "");
    CHECK(!e.has_log(k + 1));
  }
}

TEST_CASE("a transaction cut off between a record and its change undoes cleanly") {
  NEED_XFS(e);
  for (int j = 0; j < 24; ++j) {
    INFO("crash at change point " << j);
    std::string rel = "c" + std::to_string(j);
    build_tree(e, rel);
    Snapshot before = snapshot(e.p(rel));
    bool finished = true;
    {
      Recording t(e, uint64_t(j) + 1);
      t.budget = j;
      try {
        mixed(t, rel);
      } catch (const Crash &) {
        finished = false;
      }
    }
    UndoResult r = e.undo(uint64_t(j) + 1);
    CHECK(r.problems.empty());
    CHECK(diff(before, snapshot(e.p(rel))) == "");
    if (finished) break;
  }
}

// Undoes `txid` (again, after an interruption) and checks that `rel` is back as `before`
// and the log is gone.
void undone_completely(Env &e, uint64_t txid, const std::string &rel, const Snapshot &before) {
  UndoResult r = e.undo(txid);
  for (auto &p : r.problems) UNSCOPED_INFO(p);
  CHECK(r.problems.empty());
  CHECK(diff(before, snapshot(e.p(rel))) == "");
  CHECK(!e.has_log(txid));
}

TEST_CASE("a transaction cut off at any crash point inside the recorder undoes cleanly") {
  NEED_XFS(e);
  // The recorder's own points, armed to throw instead of exiting: a data object without
  // its record, a record without its change (a Made step without its object among them), a record without its
  // change (also of the namespace changes the recorder makes itself), a stash done.
  for (const char *point :
       {"undo.after_backup", "undo.after_record", "undo.after_stash", "undo.after_log_dir"}) {
    for (long j = 1; j < 400; ++j) {
      INFO("crash at arrival " << j << " at " << point);
      std::string rel = std::string("p") + point + "." + std::to_string(j);
      build_tree(e, rel);
      Snapshot before = snapshot(e.p(rel));
      bool finished = true;
      uint64_t txid = 5000 + uint64_t(j);
      {
        Recording t(e, txid);
        crash::arm_for_test(point, j, [] { throw Crash{}; });
        try {
          mixed(t, rel);
        } catch (const Crash &) {
          finished = false;
        }
        crash::disarm();
      }
      undone_completely(e, txid, rel, before);
      if (finished) break;  // every arrival at this point has been cut once
    }
  }
}

TEST_CASE("a rollback cut off inside a directory the transaction made finishes on the next run") {
  NEED_XFS(e);
  long cuts = 0;
  for (long j = 1; j < 100; ++j) {
    INFO("crash at arrival " << j << " at undo.mid_tree");
    std::string rel = "m" + std::to_string(j);
    build_tree(e, rel);
    Snapshot before = snapshot(e.p(rel));
    uint64_t txid = 7000 + uint64_t(j);
    {
      Recording t(e, txid);
      mixed(t, rel);
    }
    bool cut = false;
    crash::arm_for_test("undo.mid_tree", j, [] { throw Crash{}; });
    try {
      e.undo(txid);
    } catch (const Crash &) {
      cut = true;
    }
    crash::disarm();
    undone_completely(e, txid, rel, before);
    if (!cut) break;  // every arrival has been cut once
    cuts++;
  }
  CHECK(cuts >= 4);  // (mixed makes that many objects below its made directories)
}

TEST_CASE("objects made inside a made directory get no undo steps and are reported removed") {
  NEED_XFS(e);
  std::string rel = "made-tree";
  build_tree(e, rel);
  Snapshot before = snapshot(e.p(rel));
  uint64_t steps_top = 0, steps_all = 0;
  {
    Recording t(e, 7500);
    t.make(rel + "/top", 'd', 0755);
    steps_top = t.log()->steps();
    t.make(rel + "/top/a", 'd', 0755);
    t.make(rel + "/top/a/f", 'f', 0644);
    t.make(rel + "/top/a/l", 'l');
    t.make(rel + "/top/g", 'f', 0600);
    steps_all = t.log()->steps();
  }
  CHECK(steps_all == steps_top);  // the four objects below `top` wrote no step
  UndoResult r = e.undo(7500);
  CHECK(r.problems.empty());
  CHECK(r.removed.size() == 5);  // top and the four below it
  CHECK(diff(before, snapshot(e.p(rel))) == "");
}

// ================================================================ the log as a whole

TEST_CASE("logged_transactions lists decimal log directories in order; discard_log empties") {
  NEED_XFS(e);
  UndoContext ctx{e.mount_fd, e.backups_fd, {}};
  CHECK(logged_transactions(e.backups_fd).empty());
  for (uint64_t id : std::vector<uint64_t>{30, 4, 1000000000000ull}) {
    std::string x = "x" + std::to_string(id);
    build_tree(e, x);
    Recording t(e, id);
    t.write(x + "/big", id % 1000, "changed");
    t.remove(x + "/d/inner");
    t.make(x + "/d/inner", 'd');  // a stashed object and a new one in every log
    t.remove(x + "/d/inner");
    t.rename(x + "/d/small-link", x + "/small");
    t.rename(x + "/small", x + "/d/small-link");
  }
  ::mkdirat(e.backups_fd, "007", 0700);  // not canonical decimal
  ::mkdirat(e.backups_fd, "12a", 0700);
  ::close(::openat(e.backups_fd, "55", O_CREAT | O_WRONLY, 0600));  // not a directory
  CHECK(logged_transactions(e.backups_fd) == std::vector<uint64_t>{4, 30, 1000000000000ull});
  CHECK_THROWS_AS(UndoLog::create(e.backups_fd, 30, true), Error);  // exists
  for (uint64_t id : std::vector<uint64_t>{30, 4, 1000000000000ull}) {
    discard_log(ctx, id);
    discard_log(ctx, id);  // idempotent
    CHECK(!e.has_log(id));
  }
  CHECK(logged_transactions(e.backups_fd).empty());
  CHECK(e.undo(30).steps == 0);  // no log: nothing to undo
  {
    build_tree(e, "y");
    Recording t(e, 77);
    t.make("y/made", 'f');  // records only (xattrs of the log): removed by one rmdir
  }
  CHECK(e.has_log(77));
  discard_log(ctx, 77);
  CHECK(!e.has_log(77));
}

TEST_CASE("damaged records and missing data objects are reported, the rest undone") {
  NEED_XFS(e);
  build_tree(e, "x");
  Snapshot before = snapshot(e.p("x"));
  uint64_t data_seq;
  {
    Recording t(e, 5);
    t.chmod("x/small", 0);
    t.write("x/aligned", 0, "zzz");
    data_seq = t.log()->steps();
    t.write("x/big", 0, "yyy");
    t.remove("x/d/inner");
    int ld = t.log()->dir_fd();
    // Damaged records and records of an unknown future format, in both forms, and a
    // stray file.
    ::symlinkat("1 D garbage", ld, "00000000000000f0");
    ::symlinkat("9 whatever", ld, "00000000000000f1");
    REQUIRE(put_record_text(ld, 0xf3, "1 M garbage", true) == 0);
    REQUIRE(put_record_text(ld, 0xf4, "9 whatever", true) == 0);
    ::close(::openat(ld, "stray", O_CREAT | O_WRONLY, 0600));
    // A record under the wrong name.
    REQUIRE(put_record_text(ld, 0xf2, record_text(ld, 1), true) == 0);
    // The clone of the first write is lost.
    REQUIRE(::unlinkat(ld, (step_name(data_seq) + ".d").c_str(), 0) == 0);
  }
  UndoResult r = e.undo(5);
  CHECK(r.steps == 12);
  CHECK(r.problems.size() == 6);
  Snapshot after = snapshot(e.p("x"));
  CHECK(after.at("small").mode == before.at("small").mode);
  CHECK(after.at("big").content == before.at("big").content);
  CHECK(after.count("d/inner"));
  CHECK(after.at("aligned").content != before.at("aligned").content);  // could not restore
  CHECK(!e.has_log(5));
}

TEST_CASE("an undo never acts on an object that merely reuses a name") {
  NEED_XFS(e);
  build_tree(e, "x");
  {
    Recording t(e, 6);
    t.link("x/small", "x/alias");
    t.rename("x/big", "x/moved");
  }
  // Outside the transaction (say, after the records, before the crash it never saw):
  // the names now belong to other objects.
  REQUIRE(::unlink(e.p("x/alias").c_str()) == 0);
  put_file(e.p("x/alias"), "another");
  REQUIRE(::unlink(e.p("x/moved").c_str()) == 0);
  put_file(e.p("x/moved"), "a third");
  UndoResult r = e.undo(6);
  CHECK(r.problems.empty());
  Snapshot after = snapshot(e.p("x"));
  CHECK(after.at("alias").content == "another");
  CHECK(after.at("moved").content == "a third");
  CHECK(!after.count("big"));
}

// Made is written before its object exists and knows it by its place (undo_exec.cc,
// made): whatever is at the name when the step is undone is what it made, which the
// daemon's entry locks guarantee. It does check the kind of object.
TEST_CASE("Made: removes what is at its name, nothing when the object was never made") {
  NEED_XFS(e);
  build_tree(e, "m");
  Snapshot before = snapshot(e.p("m"));
  {
    Recording t(e, 61);
    t.make("m/f", 'f');
    t.make("m/dir", 'd');
    t.make("m/other", 'f');
    UndoStep s;  // a record whose creation never happened (a crash in between)
    s.kind = StepKind::Made;
    s.obj = backing_id(open_fd(e.p("m"), O_PATH).get());
    s.name = "never";
    t.log()->append(s);
  }
  // The made directory got things below it without steps (as inside a made directory),
  // and `other` became a directory: its step made a file.
  put_file(e.p("m/dir/below"), "x");
  REQUIRE(::unlink(e.p("m/other").c_str()) == 0);
  REQUIRE(::mkdir(e.p("m/other").c_str(), 0755) == 0);
  UndoResult r = e.undo(61);
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].find("is not the kind of object the step made") != std::string::npos);
  Snapshot after = snapshot(e.p("m"));
  CHECK(S_ISDIR(after.at("other").mode));  // reported, left alone
  after.erase("other");
  before.erase(".");  // (its times: the directory `other` is still in it)
  after.erase(".");
  CHECK(diff(before, after) == "");
  CHECK(r.removed.size() == 3);  // f, dir and dir/below
}

TEST_CASE("a log removal cut short leaves only steps whose undo changes nothing") {
  NEED_XFS(e);
  // Records go highest seq first: any crash during the removal that follows an abort's
  // undo leaves the steps up to some seq m that the undo did not retire (attributes,
  // data, xattrs), with their data objects. Undoing those again must change nothing.
  // (Namespace steps are retired as they are undone, and must be: a Made step knows its
  // object by its place, which holds the restored original by then.)
  build_tree(e, "x");
  Snapshot before = snapshot(e.p("x"));
  uint64_t n;
  {
    Recording t(e, 1);
    mixed(t, "x");
    n = t.log()->steps();
  }
  save_log(e, 1, e.mnt + "/side");
  CHECK(e.undo(1).problems.empty());
  REQUIRE(diff(before, snapshot(e.p("x"))) == "");
  for (uint64_t m = 1; m <= n; ++m) {
    INFO("records 1.." << m << " of " << n << " left");
    uint64_t left = restore_log(e, e.mnt + "/side", 100 + m, m);
    UndoResult r = e.undo(100 + m);
    CHECK(r.steps == left);
    for (auto &p : r.problems) UNSCOPED_INFO(p);
    CHECK(r.problems.empty());
    CHECK(diff(before, snapshot(e.p("x"))) == "");
  }
}

// Records are xattrs of the log directory, symlinks past kMaxXattrRecords (listxattr
// returns at most 64 KiB of names); logs of earlier daemons hold symlinks only
// (undo_record.h). Every form is read and undone alike.
namespace {

struct RecordForms {
  size_t xattrs = 0, symlinks = 0;
};

RecordForms record_forms(int log_fd) {
  RecordForms f;
  std::vector<char> names(65536);
  ssize_t len = ::flistxattr(log_fd, names.data(), names.size());
  for (ssize_t i = 0; i < len; i += ssize_t(std::strlen(names.data() + i)) + 1)
    if (std::string_view(names.data() + i).substr(0, kRecordXattrPrefix.size()) ==
        kRecordXattrPrefix)
      f.xattrs++;
  for (auto &de : undo_io::list_dir(log_fd)) {
    uint64_t seq;
    if (record_seq(de.name, seq)) f.symlinks++;
  }
  return f;
}

}  // namespace

TEST_CASE("records past the xattr limit are symlinks, and a log of both forms is undone") {
  NEED_XFS(e);
  build_tree(e, "x");
  Snapshot before = snapshot(e.p("x"));
  const uint64_t files = kMaxXattrRecords + 10;
  {
    Recording t(e, 71);
    for (uint64_t k = 0; k < files; ++k) t.make("x/n" + std::to_string(k), 'f');
    RecordForms f = record_forms(t.log()->dir_fd());
    CHECK(f.xattrs == kMaxXattrRecords);
    CHECK(f.symlinks == files + 1 - kMaxXattrRecords);  // (+1: the directory's Attrs)
  }
  UndoResult r = e.undo(71);
  CHECK(r.problems.empty());
  CHECK(r.steps == files + 1);
  CHECK(r.removed.size() == files);
  CHECK(diff(before, snapshot(e.p("x"))) == "");
  CHECK(!e.has_log(71));
}

TEST_CASE("a log of symlink records, as earlier daemons wrote it, is undone the same") {
  NEED_XFS(e);
  build_tree(e, "x");
  Snapshot before = snapshot(e.p("x"));
  {
    Recording t(e, 72);
    mixed(t, "x");
    int ld = t.log()->dir_fd();
    REQUIRE(mark_lazy_commit(ld, 41) == 0);
    CHECK(lazy_commit_seq(e.backups_fd, 72) == 41);
    // Every record and the marker turned into the old form.
    std::vector<std::string> problems;
    auto recs = read_records(ld, problems);
    REQUIRE(problems.empty());
    REQUIRE(recs.size() > 10);
    CHECK(record_forms(ld).symlinks == 0);
    for (auto &rec : recs) {
      REQUIRE(::fremovexattr(ld, record_xattr_name(rec.seq).c_str()) == 0);
      REQUIRE(::symlinkat(rec.text.c_str(), ld, step_name(rec.seq).c_str()) == 0);
    }
    REQUIRE(::fremovexattr(ld, "trusted.txnfs.lazy") == 0);
    CHECK(lazy_commit_seq(e.backups_fd, 72) == std::nullopt);
    REQUIRE(::symlinkat("41", ld, "lazy") == 0);
    CHECK(lazy_commit_seq(e.backups_fd, 72) == 41);
    CHECK(record_forms(ld).xattrs == 0);
  }
  UndoResult r = e.undo(72);
  for (auto &p : r.problems) UNSCOPED_INFO(p);
  CHECK(r.problems.empty());
  CHECK(diff(before, snapshot(e.p("x"))) == "");
  CHECK(!e.has_log(72));
}

TEST_CASE("the durable mark of lazy commits is read back, and a garbled one is an error") {
  NEED_XFS(e);
  CHECK(lazy_durable_upto(e.backups_fd) == 0);
  REQUIRE(set_lazy_durable(e.backups_fd, 7) == 0);
  CHECK(lazy_durable_upto(e.backups_fd) == 7);
  REQUIRE(set_lazy_durable(e.backups_fd, 1234567) == 0);
  CHECK(lazy_durable_upto(e.backups_fd) == 1234567);
  // Recovery must not guess which lazy commits were durable.
  REQUIRE(::fsetxattr(e.backups_fd, "trusted.txnfs.lazy_durable", "12x", 3, 0) == 0);
  CHECK_THROWS_WITH(lazy_durable_upto(e.backups_fd), Catch::Contains("garbled"));
  REQUIRE(::fremovexattr(e.backups_fd, "trusted.txnfs.lazy_durable") == 0);
  CHECK(lazy_durable_upto(e.backups_fd) == 0);
}

TEST_CASE("a record stored in both forms is reported, not guessed at") {
  NEED_XFS(e);
  build_tree(e, "x");
  {
    Recording t(e, 73);
    t.chmod("x/small", 0);
    int ld = t.log()->dir_fd();
    REQUIRE(::symlinkat(record_text(ld, 1).c_str(), ld, step_name(1).c_str()) == 0);
  }
  UndoResult r = e.undo(73);
  REQUIRE(r.problems.size() == 1);
  CHECK(r.problems[0].find("stored both as a symlink and as an xattr") != std::string::npos);
}

TEST_CASE("removing a log never follows symlinks out of it") {
  NEED_XFS(e);
  build_tree(e, "x");
  Snapshot before = snapshot(e.p("x"));
  {
    Recording t(e, 3);
    t.write("x/big", 0, "x");
    int ld = t.log()->dir_fd();
    REQUIRE(::symlinkat(e.p("x").c_str(), ld, "escape") == 0);
    REQUIRE(::mkdirat(ld, "stray-dir", 0700) == 0);
    REQUIRE(::symlinkat(e.p("x/d").c_str(), ld, "stray-dir/link") == 0);
    REQUIRE(::symlinkat(e.p("x/big").c_str(), ld, "00000000000000aa.d") == 0);
    // A record name on something that is not a symlink.
    REQUIRE(::close(::openat(ld, "00000000000000ab", O_CREAT | O_WRONLY, 0600)) == 0);
  }
  UndoResult r = e.undo(3);
  CHECK(r.problems.size() == 1);  // the record that is not a symlink
  CHECK(diff(before, snapshot(e.p("x"))) == "");
  CHECK(!e.has_log(3));
}

TEST_CASE("without reflink (ext4 /tmp) backups and restores fall back to copying") {
  NEED_FS(e, false);
  if (supports_reflink(e.mnt)) WARN("this file system clones: the fallback is not exercised");
  round_trip(e, 1, mixed, false);
  round_trip(e, 2, mixed, true);  // a store that thinks it has reflink copies too
  round_trip(e, 3, [](Recording &t, const std::string &r) {
    std::mt19937_64 rng(42);
    for (int i = 0; i < 30; ++i) {
      uint64_t size = uint64_t(t.lstat_of(r + "/big").st_size);
      if (rng() % 5 == 0) t.truncate(r + "/big", size ? rng() % size : 0);
      else t.write(r + "/big", rng() % (size + 5000), pattern(1 + rng() % 20000, unsigned(i)));
    }
  });
}
