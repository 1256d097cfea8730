// Undo of one step, per kind. Every step first checks that the objects it would act on
// are the ones its record names (by handle: ino + generation; Made, written before its
// object existed, by place -- see made()), so a step whose change never happened, or
// that an earlier, interrupted run already undid, does nothing.
// Attrs, Data and Xattrs set absolute states and may simply run again.
//
// Why descending order converges after any interruption: Attrs, Data and Xattrs steps
// write absolute states, and the lower-seq steps of each object (its Attrs first of all)
// run after its higher ones every time. Namespace steps (Created, Linked, Removed,
// Renamed) are retired as soon as they are undone: their record is deleted right after
// the change that undid them (both are XFS metadata operations, which its journal keeps
// in order). So an interrupted run leaves exactly the namespace steps not yet undone,
// and the tree as it was after them. Rerunning an undone namespace step on the restored
// tree is NOT harmless: an object that returned to its old name (an exchange, then an
// exchange back) looks like one still waiting to be moved -- the fuzzer found a crash
// during an abort's log removal that then failed recovery.
#include "recovery/undo/undo_exec.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "store/crash_point.h"
#include "store/error.h"
#include "store/fault_point.h"
#include "recovery/undo/undo_io.h"
#include "recovery/undo/undo_record.h"

namespace txnfs {

namespace {

// An error after which going on is unsafe; everything else is a problem of one step.
struct Fatal : Error {
  using Error::Error;
};

[[noreturn]] void fail(const std::string &what, int e) {
  std::string msg = what + ": " + std::strerror(e);
  if (undo_io::fatal_errno(e)) throw Fatal(msg);
  throw Error(msg);
}

// Names may hold any byte but '/' and NUL: show them quoted and escaped.
std::string shown(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += fmt::format("\\{}", char(c));
    else if (c < 0x20 || c >= 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += char(c);
  }
  return out + "\"";
}

std::string data_name(uint64_t seq) { return step_name(seq) + ".d"; }

bool same(const BackingId &a, const BackingId &b) {
  return a.ino == b.ino && a.generation == b.generation;
}

// Writing, truncating, cloning into and chown()ing a file all drop its file
// capabilities (security.capability), even for root. An undo step must not have that
// side effect: which capabilities the file has is the Xattrs step's business, and it
// may already have run (it can have a higher seq than the steps that write). So a step
// that modifies a regular file reads them first and puts them back afterwards.
class CapKeeper {
 public:
  explicit CapKeeper(const std::string &path) : path_(path) {
    char buf[256];
    ssize_t n = ::getxattr(path_.c_str(), kName, buf, sizeof buf);
    if (n >= 0) cap_.assign(buf, size_t(n)), had_ = true;
  }
  void restore() {
    if (!had_) return;
    char buf[256];
    ssize_t n = ::getxattr(path_.c_str(), kName, buf, sizeof buf);
    if (n >= 0 && std::string_view(buf, size_t(n)) == cap_) return;
    if (::setxattr(path_.c_str(), kName, cap_.data(), cap_.size(), 0) != 0)
      fail("keep security.capability", errno);
  }

 private:
  static constexpr const char *kName = "security.capability";
  std::string path_, cap_;
  bool had_ = false;
};

class Executor {
 public:
  Executor(const UndoContext &ctx, int log_fd, UndoResult &r) : ctx_(ctx), log_(log_fd), r_(r) {}

  // Undoes `s`; a failure of this step alone goes to r.problems. Throws Fatal.
  void run(const UndoStep &s) {
    try {
      if (dispatch(s)) r_.undone++;
      if (s.kind != StepKind::Attrs && s.kind != StepKind::Data && s.kind != StepKind::Xattrs)
        if (int e = remove_record(log_, s.seq); e != 0 && e != ENOENT)
          fail("retire record " + step_name(s.seq), e);
    } catch (const Fatal &) {
      throw;
    } catch (const Error &e) {
      r_.problems.push_back(
          fmt::format("step {} ({}): {}", step_name(s.seq), step_kind_name(s.kind), e.what()));
    }
  }

 private:
  bool dispatch(const UndoStep &s) {
    switch (s.kind) {
      case StepKind::Attrs:
        return attrs(s);
      case StepKind::Data:
        return data(s);
      case StepKind::Created:
        return created(s);
      case StepKind::Linked:
        return linked(s);
      case StepKind::Removed:
        return removed(s);
      case StepKind::Renamed:
        return renamed(s);
      case StepKind::Xattrs:
        return xattrs(s);
      case StepKind::Made:
        return made(s);
    }
    throw Error("unknown step kind");
  }

  // The object `id` names, or no fd when it no longer exists (stale handle, or
  // unlinked and only kept alive by someone's open fd).
  UniqueFd open_obj(const BackingId &id, int flags, const char *what) {
    UniqueFd f = open_by_fh(ctx_.mount_fd, id.fh, flags | O_CLOEXEC);
    if (!f && (f.err() == ESTALE || f.err() == ENOENT)) return UniqueFd();
    if (!f) fail(fmt::format("open {} (inode {}) by handle", what, id.ino), f.err());
    struct stat st;
    if (::fstat(f.get(), &st) != 0) fail(fmt::format("stat {}", what), errno);
    if (st.st_nlink == 0) return UniqueFd();
    return f;
  }
  UniqueFd open_dir(const BackingId &id, const char *what) {
    return open_obj(id, O_PATH | O_DIRECTORY, what);
  }

  // Does `name` in `dirfd` name the object `id`?
  bool names(int dirfd, const std::string &name, const BackingId &id) {
    UniqueFd f(::openat(dirfd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!f) {
      if (f.err() == ENOENT) return false;
      fail("look up " + shown(name), f.err());
    }
    return same(backing_id(f.get()), id);
  }

  bool in_log(const std::string &name, struct stat *st = nullptr) {
    struct stat tmp;
    if (::fstatat(log_, name.c_str(), st ? st : &tmp, AT_SYMLINK_NOFOLLOW) == 0) return true;
    if (errno != ENOENT) fail("stat " + name, errno);
    return false;
  }

  void touch(const BackingId &id) {
    if (touched_.insert(id.fh).second) r_.touched.push_back(id);
  }

  static void fstat_or_fail(int fd, struct stat &st) {
    if (::fstat(fd, &st) != 0) fail("stat", errno);
  }

  // Regular files: size. Then owner (chown clears set-ID bits and file capabilities:
  // the first are put back by the chmod that follows, the second kept across it), mode
  // (not for symlinks, whose mode means nothing), and last atime/mtime, which the
  // changes before would have moved.
  bool attrs(const UndoStep &s) {
    UniqueFd o = open_obj(s.obj, O_PATH, "object");
    if (!o) return false;
    std::string path = proc_path(o.get());
    struct stat st;
    fstat_or_fail(o.get(), st);
    bool changed = false;
    std::optional<CapKeeper> caps;
    if (S_ISREG(st.st_mode)) caps.emplace(path);
    if (S_ISREG(st.st_mode) && uint64_t(st.st_size) != s.size) {
      UniqueFd w(::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
      if (!w) fail("open for truncate", w.err());
      if (::ftruncate(w.get(), off_t(s.size)) != 0) fail("truncate", errno);
      changed = true;
    }
    if (st.st_uid != s.uid || st.st_gid != s.gid) {
      if (::fchownat(o.get(), "", s.uid, s.gid, AT_EMPTY_PATH) != 0) fail("chown", errno);
      changed = true;
    }
    if (caps && changed) caps->restore();
    if (!S_ISLNK(st.st_mode)) {
      fstat_or_fail(o.get(), st);
      if ((st.st_mode & 07777) != (s.mode & 07777)) {
        if (::chmod(path.c_str(), s.mode & 07777) != 0) fail("chmod", errno);
        changed = true;
      }
    }
    fstat_or_fail(o.get(), st);
    if (st.st_atim.tv_sec != s.atime.tv_sec || st.st_atim.tv_nsec != s.atime.tv_nsec ||
        st.st_mtim.tv_sec != s.mtime.tv_sec || st.st_mtim.tv_nsec != s.mtime.tv_nsec) {
      timespec ts[2] = {s.atime, s.mtime};
      if (::utimensat(o.get(), "", ts, AT_EMPTY_PATH) != 0) fail("set times", errno);
      changed = true;
    }
    if (changed) touch(s.obj);
    return changed;
  }

  // The range goes back from the clone at the same offsets: aligned blocks by
  // FICLONERANGE, an unaligned tail (the old EOF block) by copying, because the kernel
  // clones a partial block only to a destination's EOF. Size and times are the Attrs
  // step's business (lower seq, so it runs after this one).
  bool data(const UndoStep &s) {
    UniqueFd o = open_obj(s.obj, O_PATH, "file");
    if (!o) return false;
    struct stat st;
    fstat_or_fail(o.get(), st);
    if (!S_ISREG(st.st_mode)) throw Error("the object is not a regular file");
    std::string dn = data_name(s.seq);
    UniqueFd d(::openat(log_, dn.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!d) {
      if (d.err() == ENOENT) throw Error("data object " + dn + " is missing");
      fail("open " + dn, d.err());
    }
    struct stat dst;
    fstat_or_fail(d.get(), dst);
    if (!S_ISREG(dst.st_mode) || uint64_t(dst.st_size) < s.off + s.len)
      throw Error("data object " + dn + " is damaged (shorter than its range)");
    CapKeeper caps(proc_path(o.get()));
    UniqueFd w(::open(proc_path(o.get()).c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY));
    if (!w) fail("open for writing", w.err());
    if (uint64_t(st.st_size) < s.off + s.len && ::ftruncate(w.get(), off_t(s.off + s.len)) != 0)
      fail("extend", errno);
    if (int e = undo_io::put_range(d.get(), w.get(), s.off, s.len, true))
      fail(fmt::format("restore {} bytes at {}", s.len, s.off), e);
    caps.restore();
    r_.bytes_restored += s.len;
    touch(s.obj);
    return true;
  }

  // Removes the object the transaction created as `name` in `dirfd`, and for a
  // directory everything below it: what the transaction made there was made without
  // steps of its own (recorder.cc, txn_make), and by now every later
  // step that put something else below it is undone. Reports every object it deletes
  // below `name` (the step reports `name`'s own). An interruption leaves the directory
  // with less in it; the next run goes on.
  void remove_made(int dirfd, const std::string &name) {
    try {
      undo_io::remove_tree(dirfd, name, [this](int d, const std::string &n, const struct stat &st) {
        TXNFS_CRASH_POINT("undo.mid_tree");
        if (S_ISDIR(st.st_mode) || st.st_nlink <= 1)
          if (UniqueFd f{::openat(d, n.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC)})
            r_.removed.push_back(backing_id(f.get()));
      });
    } catch (const Fatal &) {
      throw;
    } catch (const Error &e) {
      if (undo_io::fatal_errno(errno_in(e))) throw Fatal(e.what());
      throw;
    }
  }

  // Removes what is at `name` in the directory s.obj: the object the transaction made
  // there, or nothing when the record was written but the object never made. The step
  // has no handle of the object (it was written before the object existed), and it
  // needs none: the name was free when the step was written, the transaction held its
  // entry lock from then on (plain requests take it too), and every later change at the
  // name has a later step, undone by now -- so whatever is there is what the step made.
  // (The type is checked all the same: a mismatch is reported, nothing is removed.)
  bool made(const UndoStep &s) {
    UniqueFd dir = open_dir(s.obj, "directory");
    if (!dir) return false;
    UniqueFd f(::openat(dir.get(), s.name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!f) {
      if (f.err() == ENOENT) return false;
      fail("open " + shown(s.name), f.err());
    }
    struct stat st;
    fstat_or_fail(f.get(), st);
    if (S_ISDIR(st.st_mode) != (s.flags == 1))
      throw Error(shown(s.name) + " is not the kind of object the step made");
    BackingId id = backing_id(f.get(), st);
    f.reset();
    remove_made(dir.get(), s.name);
    touch(s.obj);
    if (S_ISDIR(st.st_mode) || st.st_nlink <= 1) r_.removed.push_back(std::move(id));
    return true;
  }

  // The object was born as <seq>.d in the log and then renamed into place.
  bool created(const UndoStep &s) {
    std::string dn = data_name(s.seq);
    bool changed = false;
    if (in_log(dn)) {
      if (!names(log_, dn, s.obj)) throw Error(dn + " is not the object the step created");
      remove_made(log_, dn);
      changed = true;
    } else if (UniqueFd dir = open_dir(s.dir, "directory");
               dir && names(dir.get(), s.name, s.obj)) {
      remove_made(dir.get(), s.name);
      touch(s.dir);
      changed = true;
    }
    // Report it as removed also when an earlier, interrupted run removed it.
    if (!open_obj(s.obj, O_PATH, "object")) r_.removed.push_back(s.obj);
    return changed;
  }

  bool linked(const UndoStep &s) {
    UniqueFd dir = open_dir(s.dir, "directory");
    if (!dir || !names(dir.get(), s.name, s.obj)) return false;
    if (::unlinkat(dir.get(), s.name.c_str(), 0) != 0) fail("unlink " + shown(s.name), errno);
    touch(s.obj);
    touch(s.dir);
    return true;
  }

  bool removed(const UndoStep &s) {
    std::string dn = data_name(s.seq);
    if (!in_log(dn)) return false;  // never stashed, or already put back
    if (!names(log_, dn, s.obj)) throw Error(dn + " is not the object the step removed");
    UniqueFd dir = open_dir(s.dir, "directory");
    if (!dir) throw Error("cannot put back " + shown(s.name) + ": its directory is gone");
    if (::renameat2(log_, dn.c_str(), dir.get(), s.name.c_str(), RENAME_NOREPLACE) != 0)
      fail("put back " + shown(s.name), errno);
    touch(s.obj);
    touch(s.dir);
    return true;
  }

  bool renamed(const UndoStep &s) {
    UniqueFd d2 = open_dir(s.dir2, "target directory");
    bool at_target = d2 && names(d2.get(), s.name2, s.obj);
    bool changed = false;
    if (at_target) {
      UniqueFd d = open_dir(s.dir, "source directory");
      if (!d) throw Error("cannot move back " + shown(s.name2) + ": the source directory is gone");
      bool whiteout = (s.flags & RENAME_WHITEOUT) && is_whiteout(d.get(), s.name);
      unsigned how = (s.flags & RENAME_EXCHANGE) || whiteout ? RENAME_EXCHANGE : RENAME_NOREPLACE;
      if (::renameat2(d2.get(), s.name2.c_str(), d.get(), s.name.c_str(), how) != 0)
        fail(fmt::format("move {} back to {}", shown(s.name2), shown(s.name)), errno);
      if (whiteout) drop_whiteout(d2.get(), s.name2);
      touch(s.obj);
      touch(s.dir);
      touch(s.dir2);
      changed = true;
    } else if ((s.flags & RENAME_WHITEOUT) && d2 && is_whiteout(d2.get(), s.name2)) {
      // An interrupted run swapped the object back with the whiteout but did not yet
      // remove the whiteout. (The transaction cannot have left one there itself: a
      // whiteout at the target was displaced into the log by this very rename.)
      UniqueFd d = open_dir(s.dir, "source directory");
      if (d && names(d.get(), s.name, s.obj)) {
        drop_whiteout(d2.get(), s.name2);
        changed = true;
      }
    }
    if (s.displaced && !(s.flags & RENAME_EXCHANGE)) {
      std::string dn = data_name(s.seq);
      if (in_log(dn)) {
        if (!d2)
          throw Error("cannot put back the displaced " + shown(s.name2) + ": directory gone");
        if (::renameat2(log_, dn.c_str(), d2.get(), s.name2.c_str(), RENAME_NOREPLACE) != 0)
          fail("put back the displaced " + shown(s.name2), errno);
        touch(s.dir2);
        changed = true;
      }
    }
    return changed;
  }

  // RENAME_WHITEOUT left a whiteout (a 0:0 character device) at the source name. The
  // object goes back by exchanging it with the whiteout (a directory cannot replace a
  // non-directory), and then the whiteout is removed: it was made by the transaction.
  bool is_whiteout(int dirfd, const std::string &name) {
    struct stat st;
    if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return false;
      fail("stat " + shown(name), errno);
    }
    return S_ISCHR(st.st_mode) && st.st_rdev == 0;
  }
  void drop_whiteout(int dirfd, const std::string &name) {
    UniqueFd w(::openat(dirfd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!w) fail("look up the whiteout " + shown(name), w.err());
    BackingId id = backing_id(w.get());
    if (::unlinkat(dirfd, name.c_str(), 0) != 0) fail("remove the whiteout " + shown(name), errno);
    r_.removed.push_back(id);
  }

  bool xattrs(const UndoStep &s) {
    UniqueFd o = open_obj(s.obj, O_PATH, "object");
    if (!o) return false;
    std::string dn = data_name(s.seq);
    UniqueFd d(::openat(log_, dn.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!d) {
      if (d.err() == ENOENT) throw Error("xattr snapshot " + dn + " is missing");
      fail("open " + dn, d.err());
    }
    undo_io::Xattrs want, have;
    if (int e = undo_io::read_xattrs(proc_path(d.get()), want)) fail("read " + dn, e);
    std::string path = proc_path(o.get());
    if (int e = undo_io::read_xattrs(path, have)) fail("read xattrs", e);
    bool changed = false;
    for (const auto &[k, v] : have)
      if (!want.count(k)) {
        if (::removexattr(path.c_str(), k.c_str()) != 0 && errno != ENODATA)
          fail("remove xattr " + shown(k), errno);
        changed = true;
      }
    for (const auto &[k, v] : want) {
      auto it = have.find(k);
      if (it != have.end() && it->second == v) continue;
      if (::setxattr(path.c_str(), k.c_str(), v.data(), v.size(), 0) != 0)
        fail("set xattr " + shown(k), errno);
      changed = true;
    }
    if (changed) touch(s.obj);
    return changed;
  }

  const UndoContext &ctx_;
  int log_;
  UndoResult &r_;
  std::set<std::string> touched_;
};

// The steps of a log, highest seq first. Unreadable or undecodable records are
// reported, never guessed at.
std::vector<UndoStep> read_steps(int log_fd, UndoResult &r) {
  std::vector<UndoStep> steps;
  for (const StoredRecord &rec : read_records(log_fd, r.problems)) {
    r.steps++;
    try {
      UndoStep s = decode_step(rec.text);
      if (s.seq != rec.seq)
        throw Error(fmt::format("damaged undo record: seq {} under its name", s.seq));
      steps.push_back(std::move(s));
    } catch (const Error &err) {
      r.problems.push_back(fmt::format("record {}: {}", step_name(rec.seq), err.what()));
    }
  }
  std::sort(steps.begin(), steps.end(),
            [](const UndoStep &a, const UndoStep &b) { return a.seq > b.seq; });
  return steps;
}

// Removes the log directory of an undone transaction. Records go first, highest seq
// first, each before its data object: a crash part-way leaves the lowest steps, whose
// undo on the restored tree changes nothing, and never a record without its data object.
void remove_undone_log(int backups_fd, const std::string &name) {
  UniqueFd log(::openat(backups_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!log) {
    if (log.err() == ENOENT) return;
    if (log.err() != ENOTDIR && log.err() != ELOOP) throw_errno("open backups/" + name, log.err());
  } else {
    std::vector<std::string> unreadable;  // (undo reported them already)
    std::vector<uint64_t> seqs;
    for (const StoredRecord &rec : read_records(log.get(), unreadable)) seqs.push_back(rec.seq);
    std::sort(seqs.rbegin(), seqs.rend());
    for (uint64_t seq : seqs) {
      if (int e = remove_record(log.get(), seq); e != 0 && e != ENOENT)
        throw_errno("remove record " + step_name(seq), e);
      TXNFS_CRASH_POINT("log.mid_remove");
      undo_io::remove_tree(log.get(), data_name(seq));
    }
  }
  undo_io::remove_tree(backups_fd, name);  // strays, then the directory itself
}

}  // namespace

UndoResult undo_transaction(const UndoContext &ctx, uint64_t txid) {
  UndoResult r;
  std::string name = std::to_string(txid);
  UniqueFd log(
      ::openat(ctx.backups_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!log) {
    if (log.err() == ENOENT) return r;
    throw_errno("open undo log backups/" + name, log.err());
  }
  std::vector<UndoStep> steps = read_steps(log.get(), r);
  Executor ex(ctx, log.get(), r);
  for (const UndoStep &s : steps) {
    if (ctx.before_step) ctx.before_step(s);
    ex.run(s);
  }
  // The restored state must be durable before the log that could restore it goes.
  if (::syncfs(ctx.mount_fd) != 0) throw_errno("syncfs", errno);
  if (!r.problems.empty() && ctx.on_problems) ctx.on_problems(txid, r);
  remove_undone_log(ctx.backups_fd, name);
  return r;
}

std::vector<std::string> inspect_log(int backups_fd, uint64_t txid, uint64_t *steps) {
  UndoResult r;
  std::string name = std::to_string(txid);
  UniqueFd log(::openat(backups_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!log) {
    if (log.err() == ENOENT) return {};
    throw_errno("open undo log backups/" + name, log.err());
  }
  for (const UndoStep &s : read_steps(log.get(), r)) {
    if (s.kind != StepKind::Data && s.kind != StepKind::Xattrs) continue;
    std::string dn = data_name(s.seq);
    struct stat st;
    if (::fstatat(log.get(), dn.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      r.problems.push_back(fmt::format("step {} ({}): its data object {} is missing",
                                       step_name(s.seq), step_kind_name(s.kind), dn));
    } else if (s.kind == StepKind::Data &&
               (!S_ISREG(st.st_mode) || uint64_t(st.st_size) < s.off + s.len)) {
      r.problems.push_back(
          fmt::format("step {} (Data): its data object {} is damaged (shorter "
                      "than its range)",
                      step_name(s.seq), dn));
    }
  }
  if (steps) *steps = r.steps;
  return r.problems;
}

// A committed transaction's log is garbage in any order: its commit record, which
// stays until this removal is durable, tells recovery to discard what is left of it. The
// records kept as xattrs go with the directory.
void discard_log(const UndoContext &ctx, uint64_t txid) {
  std::string name = std::to_string(txid);
  if (int e = TXNFS_FAULT("log.discard")) throw_errno("remove committed log backups/" + name, e);
  // Most logs hold nothing but their records (a transaction that only made objects and
  // changed attributes): one rmdir, without listing the directory first.
  if (::unlinkat(ctx.backups_fd, name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) return;
  undo_io::remove_tree(ctx.backups_fd, name, [](int, const std::string &, const struct stat &) {
    TXNFS_CRASH_POINT("log.mid_remove");
  });
}

std::vector<uint64_t> logged_transactions(int backups_fd) {
  std::vector<uint64_t> out;
  for (const auto &e : undo_io::list_dir(backups_fd)) {
    const std::string &n = e.name;
    uint64_t txid;
    auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), txid, 10);
    if (ec != std::errc() || p != n.data() + n.size() || std::to_string(txid) != n) continue;
    bool dir = e.type == DT_DIR;
    if (e.type == DT_UNKNOWN) {
      struct stat st;
      dir = ::fstatat(backups_fd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
    }
    if (dir) out.push_back(txid);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace txnfs
