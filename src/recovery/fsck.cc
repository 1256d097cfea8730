#include "fsck.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "backing.h"
#include "error.h"
#include "metadb.h"

namespace txnfs {

namespace {

struct Object {
  std::string path;  // relative to the tree, "/" for its root
  mode_t mode;
};

// Every object of the tree by backing inode number (first path found for hard links).
void walk(int dirfd, const std::string &path, std::unordered_map<uint64_t, Object> &out,
          std::vector<std::string> &problems) {
  int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    out.try_emplace(st.st_ino, Object{child, st.st_mode});
    if (S_ISDIR(st.st_mode)) {
      int sub = ::openat(::dirfd(d), e->d_name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) {
        walk(sub, child, out, problems);
        ::close(sub);
      }
    }
  }
  ::closedir(d);
}

std::string describe(const HandleRow &r) {
  return fmt::format("row nodeid={} uuid={}{}", r.nodeid, r.uuid,
                     r.parent ? fmt::format(" (name {} in nodeid {})", r.name, *r.parent) : "");
}

}  // namespace

FsckReport fsck_store(const StorePaths &paths) {
  check_store_layout(paths);
  auto db = MetaDb::open(paths.db);
  FsckReport rep;
  int tree_fd = ::open(paths.tree.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (tree_fd < 0) throw_errno("open " + paths.tree, errno);
  struct stat tst;
  ::fstat(tree_fd, &tst);
  auto nodeid_of = [&](uint64_t ino) { return ino == tst.st_ino ? 1 : ino; };

  std::unordered_map<uint64_t, Object> objects;
  objects.emplace(tst.st_ino, Object{"/", tst.st_mode});
  walk(tree_fd, "/", objects, rep.problems);
  rep.objects = objects.size();

  std::unordered_set<uint64_t> rows;
  std::unordered_map<uint64_t, uint64_t> ino_of_nodeid;
  std::vector<HandleRow> all;
  db->for_each_handle([&](const HandleRow &r) {
    all.push_back(r);
    ino_of_nodeid[r.nodeid] = r.ino;
  });
  rep.rows = all.size();
  for (const HandleRow &r : all) {
    rows.insert(r.nodeid);
    int fd = open_by_fh(tree_fd, r.fh, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      rep.problems.push_back(fmt::format("{}: its object is gone ({})", describe(r),
                                         std::strerror(-fd)));
      continue;
    }
    BackingId id = backing_id(fd);
    struct stat st;
    ::fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
    ::close(fd);
    if (id.ino != r.ino || id.generation != r.generation || nodeid_of(id.ino) != r.nodeid)
      rep.problems.push_back(fmt::format("{}: handle leads to inode {} generation {}, row says "
                                         "inode {} generation {}",
                                         describe(r), id.ino, id.generation, r.ino, r.generation));
    if ((st.st_mode & S_IFMT) != r.type)
      rep.problems.push_back(fmt::format("{}: object type {:o} differs from recorded {:o}",
                                         describe(r), st.st_mode & S_IFMT, r.type));
    auto obj = objects.find(id.ino);
    if (obj == objects.end()) {
      rep.problems.push_back(fmt::format("{}: its object is not in the tree", describe(r)));
      continue;
    }
    if (r.parent) {
      auto pino = ino_of_nodeid.find(*r.parent);
      auto pobj = pino == ino_of_nodeid.end() ? objects.end() : objects.find(pino->second);
      struct stat nst;
      bool ok = false;
      if (pobj != objects.end()) {
        std::string p = pobj->second.path == "/" ? "" : pobj->second.path;
        ok = ::fstatat(tree_fd, (("." + p) + "/" + r.name).c_str(), &nst,
                       AT_SYMLINK_NOFOLLOW) == 0 &&
             nst.st_ino == id.ino;
      }
      if (!ok)
        rep.problems.push_back(fmt::format("{}: that name does not lead to it (it is at {})",
                                           describe(r), obj->second.path));
    }
  }
  for (const auto &[ino, obj] : objects)
    if (!rows.count(nodeid_of(ino)))
      rep.problems.push_back(fmt::format("{} (inode {}) has no handle row", obj.path, ino));

  if (DIR *d = ::opendir(paths.backups.c_str())) {
    while (dirent *e = ::readdir(d)) {
      std::string_view n = e->d_name;
      if (n != "." && n != "..")
        rep.problems.push_back(fmt::format("backup {}/{} belongs to no transaction",
                                           paths.backups, n));
    }
    ::closedir(d);
  }
  ::close(tree_fd);
  return rep;
}

}  // namespace txnfs
