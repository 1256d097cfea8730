#include "recovery/fsck.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "store/backing.h"
#include "store/error.h"
#include "store/handle_journal.h"
#include "store/metadb.h"
#include "recovery/recover.h"
#include "recovery/undo/undo_exec.h"
#include "recovery/undo/undo_io.h"
#include "recovery/undo/undo_log.h"
#include "recovery/undo/undo_record.h"

namespace txnfs {

namespace {

struct Object {
  std::string path;  // relative to the tree, "/" for its root
  mode_t mode;
  uint64_t parent_ino;  // directory of the first name found (0 for the root)
  std::string name;     // that name
  dev_t rdev = 0;
  nlink_t nlink = 0;
  uint32_t names = 0;  // names found in the tree
};

using Objects = std::unordered_map<uint64_t, Object>;

// Every object of the tree by backing inode number (first path found for hard links).
// Reads directories with O_NOATIME: recovery (which reconciles after restoring every
// directory's times) and fsck must not move them.
int open_dir_noatime(int dirfd) {
  int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOATIME);
  if (fd < 0 && errno == EPERM) fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  return fd;
}

void walk(int dirfd, const std::string &path, uint64_t dir_ino, Objects &out,
          std::vector<std::string> &problems) {
  int fd = open_dir_noatime(dirfd);
  DIR *d = fd >= 0 ? ::fdopendir(fd) : nullptr;
  if (!d) {
    problems.push_back(fmt::format("cannot read directory {}: {}", path, std::strerror(errno)));
    if (fd >= 0) ::close(fd);
    return;
  }
  while (dirent *e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n == "." || n == "..") continue;
    std::string child = (path == "/" ? "/" : path + "/") + std::string(n);
    struct stat st;
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      problems.push_back(fmt::format("cannot stat {}: {}", child, std::strerror(errno)));
      continue;
    }
    auto it = out.try_emplace(st.st_ino, Object{child, st.st_mode, dir_ino, std::string(n)}).first;
    it->second.rdev = st.st_rdev;
    it->second.nlink = st.st_nlink;
    it->second.names++;
    if (S_ISDIR(st.st_mode)) {
      UniqueFd sub(::openat(::dirfd(d), e->d_name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (sub) walk(sub.get(), child, st.st_ino, out, problems);
    }
  }
  ::closedir(d);
}

// What an object is, for messages. A whiteout (RENAME_WHITEOUT) is a 0:0 char device.
std::string kind_of(const Object &o) {
  switch (o.mode & S_IFMT) {
    case S_IFREG:
      return "file";
    case S_IFDIR:
      return "directory";
    case S_IFLNK:
      return "symlink";
    case S_IFCHR:
      return o.rdev == 0 ? "whiteout" : "char device";
    case S_IFBLK:
      return "block device";
    case S_IFIFO:
      return "fifo";
    case S_IFSOCK:
      return "socket";
  }
  return "object";
}

// A name the undo-log machinery gives entries of a log: a record ("<16 hex>") or a
// data, stashed or newborn object ("<16 hex>.d"). Such names belong in
// STORE/.txnfs/backups/<txid>/; in the tree, without a handle row, they are what a
// rollback left behind.
bool log_entry_name(std::string_view n) {
  if (n.size() == 18 && n.substr(16) == ".d") n = n.substr(0, 16);
  return n.size() == 16 && std::all_of(n.begin(), n.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string describe(const HandleRow &r) {
  return fmt::format("row nodeid={} uuid={}{}", r.nodeid, r.uuid,
                     r.parent ? fmt::format(" (name {} in nodeid {})", r.name, *r.parent) : "");
}

// What is wrong with one row, compared with the tree. `fix` says how reconcile
// repairs it.
enum class Fix { None, Delete, Replace, Rename };
struct Verdict {
  Fix fix = Fix::None;
  std::vector<std::string> problems;
};

struct Checker {
  int tree_fd;
  uint64_t tree_ino;
  Objects objects;
  std::unordered_map<uint64_t, uint64_t> ino_of_nodeid;
  std::vector<std::string> walk_problems;

  explicit Checker(int fd) : tree_fd(fd) {
    struct stat tst;
    if (::fstat(tree_fd, &tst) != 0) throw_errno("stat the tree", errno);
    tree_ino = tst.st_ino;
    objects.emplace(tst.st_ino, Object{"/", tst.st_mode, 0, ""});
    walk(tree_fd, "/", tst.st_ino, objects, walk_problems);
  }
  uint64_t nodeid_of(uint64_t ino) const { return ino == tree_ino ? 1 : ino; }

  Verdict check(const HandleRow &r) {
    Verdict v;
    UniqueFd found = open_by_fh(tree_fd, r.fh, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (!found) {
      v.problems.push_back(
          fmt::format("{}: its object is gone ({})", describe(r), std::strerror(found.err())));
      v.fix = Fix::Delete;
      return v;
    }
    BackingId id = backing_id(found.get());
    struct stat st;
    ::fstatat(found.get(), "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
    found.reset();
    if (id.ino != r.ino || id.generation != r.generation || nodeid_of(id.ino) != r.nodeid) {
      v.problems.push_back(
          fmt::format("{}: handle leads to inode {} generation {}, row says "
                      "inode {} generation {}",
                      describe(r), id.ino, id.generation, r.ino, r.generation));
      v.fix = Fix::Delete;
    }
    if ((st.st_mode & S_IFMT) != r.type) {
      v.problems.push_back(fmt::format("{}: object type {:o} differs from recorded {:o}",
                                       describe(r), st.st_mode & S_IFMT, r.type));
      if (v.fix == Fix::None) v.fix = Fix::Replace;
    }
    auto obj = objects.find(id.ino);
    if (obj == objects.end() || st.st_nlink == 0) {
      v.problems.push_back(fmt::format("{}: its object is not in the tree", describe(r)));
      v.fix = Fix::Delete;
      return v;
    }
    if (r.parent) {
      auto pino = ino_of_nodeid.find(*r.parent);
      auto pobj = pino == ino_of_nodeid.end() ? objects.end() : objects.find(pino->second);
      struct stat nst;
      bool ok = false;
      std::string there;
      if (pobj == objects.end()) {
        there = fmt::format("its directory nodeid {} is not in the tree", *r.parent);
      } else {
        std::string p = pobj->second.path == "/" ? "" : pobj->second.path;
        std::string at = p + "/" + r.name;
        if (::fstatat(tree_fd, ("." + at).c_str(), &nst, AT_SYMLINK_NOFOLLOW) != 0)
          there = fmt::format("{} does not exist", at);
        else if (nst.st_ino != id.ino)
          there = fmt::format("{} is another object (inode {})", at, nst.st_ino);
        else ok = true;
      }
      if (!ok) {
        v.problems.push_back(
            fmt::format("{}: its name does not lead to it: {}; the object is "
                        "at {}",
                        describe(r), there, obj->second.path));
        if (v.fix == Fix::None) v.fix = Fix::Rename;
      }
    }
    return v;
  }
};

// A new row for the object `ino` of the tree, named by its first name found.
HandleRow row_for(const Checker &c, uint64_t ino, const Object &obj) {
  std::string rel = obj.path == "/" ? "." : "." + obj.path;
  BackingId id;
  {
    UniqueFd fd(::openat(c.tree_fd, rel.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) throw_errno("open " + obj.path, fd.err());
    id = backing_id(fd.get());
  }
  HandleRow row;
  row.nodeid = c.nodeid_of(ino);
  row.generation = id.generation;
  row.ino = id.ino;
  row.fh = id.fh;
  row.type = obj.mode & S_IFMT;
  if (obj.parent_ino) {
    row.parent = c.nodeid_of(obj.parent_ino);
    row.name = obj.name;
  }
  return row;
}

bool decimal_name(std::string_view n, uint64_t &v) {
  auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), v, 10);
  return ec == std::errc() && p == n.data() + n.size() && std::to_string(v) == n;
}

// The damage mark: every open row of the damage table, and every undo log kept in
// .txnfs/damaged that no open row names.
void check_damage(const StorePaths &paths, MetaDb &db, FsckReport &rep) {
  std::set<std::string> kept;
  for (const DamageRow &d : db.open_damage()) {
    rep.problems.push_back("store marked damaged: " + describe_damage(paths, d));
    if (!d.kept.empty()) kept.insert(d.kept);
  }
  std::string dir = damaged_dir(paths);
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) {
    if (fd.err() == ENOENT) return;
    throw_errno("open " + dir, fd.err());
  }
  for (const auto &e : undo_io::list_dir(fd.get()))
    if (!kept.count(".txnfs/damaged/" + e.name))
      rep.problems.push_back(fmt::format(
          "{}/{} is an undo log kept by an incomplete rollback, but no open damage record "
          "names it: look at what it holds, then delete it",
          dir, e.name));
}

// Whether a daemon serves the store now (holds its lock).
bool served(const StorePaths &paths) {
  try {
    StoreLock lock(paths);
    return false;
  } catch (const Error &) {
    return true;
  }
}

// Problems of the recovery state: logs, transaction records, strays in backups/, the
// handle table's stale mark.
void check_recovery_state(const StorePaths &paths, MetaDb &db, FsckReport &rep) {
  if (auto why = handles_stale_reason(paths))
    rep.problems.push_back(
        fmt::format("the handle table is marked for reconciling ({}): recovery reconciles it "
                    "(txnfs recover STORE, or the next mount)",
                    *why));
  std::map<uint64_t, std::string> txns;
  for (auto &[id, state] : db.all_txns()) txns[id] = state;
  std::unordered_set<uint64_t> logs;
  UniqueFd backups(::open(paths.backups.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!backups) throw_errno("open " + paths.backups, backups.err());
  int backups_fd = backups.get();
  uint64_t mark = 0;  // lazy commits at or below it are committed (set_lazy_durable)
  try {
    mark = lazy_durable_upto(backups_fd);
  } catch (const Error &e) {
    rep.problems.push_back(e.what());
  }
  DIR *d = ::fdopendir(::dup(backups_fd));
  if (!d) throw_errno("read " + paths.backups, errno);
  std::vector<std::string> names;
  while (dirent *e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string &n : names) {
    uint64_t id;
    struct stat st;
    bool log = decimal_name(n, id) &&
               ::fstatat(backups_fd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
               S_ISDIR(st.st_mode);
    if (!log) {
      rep.problems.push_back(fmt::format("backup {}/{} belongs to no transaction (not an undo log)",
                                         paths.backups, n));
      continue;
    }
    logs.insert(id);
    uint64_t steps = 0;
    std::vector<std::string> damage;
    try {
      damage = inspect_log(backups_fd, id, &steps);
    } catch (const Error &e) {
      damage.push_back(e.what());
    }
    auto t = txns.find(id);
    std::optional<uint64_t> seq = lazy_commit_seq(backups_fd, id);
    // (Only commit records must exist: begin writes no row, see schema.sql.)
    if (t == txns.end() && seq && *seq <= mark)
      rep.problems.push_back(fmt::format(
          "undo log {}/{} ({} steps) of committed transaction {} (a lazy commit, durable by "
          "the mark) is still there: recovery discards it (txnfs recover STORE)",
          paths.backups, n, steps, id));
    else if (t == txns.end())
      rep.problems.push_back(
          fmt::format("undo log {}/{} ({} steps) of unfinished transaction {} (no commit record): "
                      "recovery rolls it back (txnfs recover STORE)",
                      paths.backups, n, steps, id));
    else if (t->second == "committed")
      rep.problems.push_back(fmt::format(
          "undo log {}/{} ({} steps) of committed transaction {} is still there: recovery "
          "discards it (txnfs recover STORE)",
          paths.backups, n, steps, id));
    else
      rep.problems.push_back(fmt::format(
          "undo log {}/{} ({} steps) of unfinished transaction {} ({}): recovery rolls it "
          "back (txnfs recover STORE)",
          paths.backups, n, steps, id, t->second));
    for (auto &p : damage)
      rep.problems.push_back(fmt::format("undo log {}/{} is damaged: {}", paths.backups, n, p));
  }
  backups.reset();
  check_damage(paths, db, rep);
  // A committed transaction's log is discarded before its record is deleted (after a
  // syncfs), so a store being served shows a committed record without a log for a few
  // milliseconds: such a record is a problem only if it stays.
  std::set<uint64_t> committed_without_log;
  for (auto &[id, state] : txns)
    if (!logs.count(id) && state == "committed") committed_without_log.insert(id);
  for (int tries = 0; !committed_without_log.empty() && tries < 40; tries++) {
    ::usleep(50 * 1000);
    std::set<uint64_t> still;
    for (auto &[id, state] : db.all_txns())
      if (committed_without_log.count(id)) still.insert(id);
    committed_without_log.swap(still);
  }
  for (auto &[id, state] : txns)
    if (!logs.count(id) && (state != "committed" || committed_without_log.count(id)))
      rep.problems.push_back(fmt::format(
          "transaction record {} ({}) has no undo log: recovery forgets it", id, state));
  for (uint64_t id : db.orphan_undo_records())
    rep.problems.push_back(fmt::format(
        "undo_records rows of transaction {}, which has no transaction record: recovery "
        "deletes them",
        id));
}

}  // namespace

FsckReport fsck_store(const StorePaths &paths) {
  check_store_layout(paths);
  auto db = MetaDb::open(paths.db);
  FsckReport rep;
  UniqueFd tree(::open(paths.tree.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!tree) throw_errno("open " + paths.tree, tree.err());
  Checker c(tree.get());
  rep.problems = c.walk_problems;
  rep.objects = c.objects.size();
  std::map<uint64_t, HandleRow> table;
  db->for_each_handle([&](const HandleRow &r) { table[r.nodeid] = r; });
  // Changes a daemon has journaled but not yet written count as made
  // (store/handle_journal.h): the serving daemon writes them within 100 ms; after a
  // crash, recovery does.
  std::vector<HandleChange> journal = read_handle_journal(paths.handle_journal);
  for (HandleChange &j : journal) {
    if (j.removal) table.erase(j.row.nodeid);
    else table[j.row.nodeid] = std::move(j.row);
  }
  if (!journal.empty() && !served(paths))
    rep.problems.push_back(fmt::format(
        "{} handle-table change{} only in {} (the daemon that made {} was stopped before "
        "writing them): recovery writes them (txnfs recover STORE)",
        journal.size(), journal.size() == 1 ? " is" : "s are", paths.handle_journal,
        journal.size() == 1 ? "it" : "them"));
  std::vector<HandleRow> all;
  for (auto &[nodeid, r] : table) {
    c.ino_of_nodeid[nodeid] = r.ino;
    all.push_back(std::move(r));
  }
  rep.rows = all.size();
  std::unordered_set<uint64_t> rows;
  for (const HandleRow &r : all) {
    rows.insert(r.nodeid);
    for (auto &p : c.check(r).problems) rep.problems.push_back(std::move(p));
  }
  for (const auto &[ino, obj] : c.objects)
    if (!rows.count(c.nodeid_of(ino)))
      rep.problems.push_back(fmt::format(
          "{} ({}, inode {}) has no handle row{}", obj.path, kind_of(obj), ino,
          log_entry_name(obj.name)
              ? ", and its name is one an undo log gives its entries (<seq> or <seq>.d): "
                "left in the tree by a rollback?"
              : ""));
  // With no undo log left, every name of an object is in the tree: a link count
  // higher than the names found means a link elsewhere -- left in .txnfs by a rollback
  // (a kept log) or made behind txnfs's back. (Logs hold links of stashed objects.)
  bool logs;
  {
    UniqueFd b(::open(paths.backups.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!b) throw_errno("open " + paths.backups, b.err());
    logs = !logged_transactions(b.get()).empty();
  }
  for (const auto &[ino, obj] : c.objects)
    if (!logs && !S_ISDIR(obj.mode) && obj.nlink > obj.names)
      rep.problems.push_back(fmt::format(
          "{} ({}, inode {}) has {} links but {} name{} in the tree: the other{} outside "
          "the tree (in STORE/.txnfs, or made behind txnfs's back)",
          obj.path, kind_of(obj), ino, obj.nlink, obj.names, obj.names == 1 ? "" : "s",
          obj.nlink - obj.names == 1 ? " is" : "s are"));
  check_recovery_state(paths, *db, rep);
  return rep;
}

std::vector<std::string> reconcile_handles(int tree_fd, MetaDb &db) {
  Checker c(tree_fd);
  std::vector<std::string> changes = c.walk_problems;
  std::vector<HandleRow> all;
  db.for_each_handle([&](const HandleRow &r) {
    all.push_back(r);
    c.ino_of_nodeid[r.nodeid] = r.ino;
  });
  db.transaction([&] {
    std::unordered_set<uint64_t> kept;
    for (const HandleRow &r : all) {
      Verdict v = c.check(r);
      switch (v.fix) {
        case Fix::None:
          kept.insert(r.nodeid);
          continue;
        case Fix::Delete:
          db.remove_handle(r.nodeid);
          changes.push_back(fmt::format("deleted {}", describe(r)));
          break;
        case Fix::Replace: {
          HandleRow row = row_for(c, r.ino, c.objects.at(r.ino));
          row.uuid = r.uuid;
          db.put_handle(row);
          kept.insert(r.nodeid);
          changes.push_back(fmt::format("replaced {} (wrong type)", describe(r)));
          break;
        }
        case Fix::Rename: {
          const Object &o = c.objects.at(r.ino);
          std::optional<uint64_t> parent;
          if (o.parent_ino) parent = c.nodeid_of(o.parent_ino);
          db.set_handle_name(r.nodeid, parent, o.name);
          kept.insert(r.nodeid);
          changes.push_back(fmt::format("{}: recorded name set to {}", describe(r), o.path));
          break;
        }
      }
    }
    for (const auto &[ino, obj] : c.objects) {
      if (kept.count(c.nodeid_of(ino))) continue;
      HandleRow row = row_for(c, ino, obj);
      db.put_handle(row);
      changes.push_back(fmt::format("added a row for {} (inode {})", obj.path, ino));
    }
  });
  return changes;
}

}  // namespace txnfs
