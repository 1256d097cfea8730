// txnfs umount: see cli_umount.h.
#include "txnfuse/cli/cli_umount.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>  // sscanf
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "store/error.h"
#include "txnfuse/cli/spawn.h"

namespace txnfs::cli {
namespace {

constexpr const char *kConnections = "/sys/fs/fuse/connections";

// A path field of /proc/self/mountinfo: space, tab, newline and backslash come as \ooo.
std::string unescape(const std::string &s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    auto octal = [&](size_t k) { return k < s.size() && s[k] >= '0' && s[k] <= '7'; };
    if (s[i] == '\\' && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out += char((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct MountEntry {
  std::string point;             // the mount point
  std::string fstype;            // e.g. "fuse.txnfs"
  std::string source;            // a txnfs mount's: its store's path (or its fsname=)
  unsigned long connection = 0;  // its directory under /sys/fs/fuse/connections
};

std::vector<MountEntry> mount_table() {
  std::ifstream in("/proc/self/mountinfo");
  if (!in) throw Error(errno, "cannot read /proc/self/mountinfo");
  std::vector<MountEntry> all;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, dev, root, point, word;
    f >> id >> parent >> dev >> root >> point;
    while (f >> word && word != "-") {
    }
    std::string fstype, source;
    f >> fstype >> source;
    unsigned major = 0, minor = 0;
    if (std::sscanf(dev.c_str(), "%u:%u", &major, &minor) != 2) continue;
    // fusectl names a connection by the kernel's dev_t of the mount: major << 20 | minor.
    all.push_back({unescape(point), fstype, unescape(source),
                   (static_cast<unsigned long>(major) << 20) | minor});
  }
  return all;
}

// The topmost mount at `path` (absolute, normalised), or none.
std::optional<MountEntry> find_mount(const std::string &path) {
  std::optional<MountEntry> found;
  for (auto &m : mount_table())
    if (m.point == path) found = m;
  return found;
}

// The txnfs mount whose source is the store at `path` (absolute, normalised), or none.
// (umount(8) takes an existing directory for a mount point and never looks for it
// among the sources.)
std::optional<MountEntry> find_store_mount(const std::string &path) {
  std::optional<MountEntry> found;
  for (auto &m : mount_table())
    if (m.fstype == "fuse.txnfs" && m.source == path) found = m;
  return found;
}

bool fusectl_mounted() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.find(std::string(" ") + kConnections + " ") != std::string::npos &&
        line.find(" - fusectl ") != std::string::npos)
      return true;
  return false;
}

int fusermount_u(const std::string &mountpoint) {
  RunResult r = spawn_and_wait({"fusermount3", "-u", mountpoint});
  if (int err = r.sys_errno ? r.sys_errno : r.exec_errno)
    throw Error(err, "cannot run fusermount3", "it comes with fuse3 (apt-get install fuse3)");
  return exit_status_of(r.wait_status) == 0 ? 0 : 1;
}

}  // namespace

int umount_command(const std::string &mountpoint, bool force) {
  // The mount table holds real paths: symbolic links on the way are resolved, but only
  // in the parent directory. Nothing on the mount itself is looked at (that could hang).
  std::filesystem::path p = std::filesystem::absolute(mountpoint).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // (a trailing slash)
  std::error_code ec;
  std::filesystem::path parent = std::filesystem::canonical(p.parent_path(), ec);
  std::string path = ec ? p.string() : (parent / p.filename()).string();
  std::optional<MountEntry> m = find_mount(path);
  if (!m)  // a store: its mount (a mount point is no store, and is not looked into)
    if ((m = find_store_mount(path))) path = m->point;
  if (!force) return fusermount_u(m ? path : mountpoint);

  if (!m) throw Error(fmt::format("{} is not a mount point", path));
  if (m->fstype != "fuse.txnfs")
    throw Error(fmt::format("{} is not a txnfs mount (it is {})", path, m->fstype),
                "txnfs umount --force only aborts txnfs mounts");

  // fusectl is mounted for the abort if it is not already, and unmounted again after it.
  bool mounted_fusectl = false;
  if (!fusectl_mounted()) {
    if (::mount("fusectl", kConnections, "fusectl", 0, nullptr) != 0)
      throw Error(errno, fmt::format("cannot mount fusectl on {}", kConnections),
                  "txnfs umount --force needs root");
    mounted_fusectl = true;
  }
  std::string abort = fmt::format("{}/{}/abort", kConnections, m->connection);
  bool aborted = false;
  int err = 0;
  int fd = ::open(abort.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    aborted = ::write(fd, "1", 1) == 1;
    if (!aborted) err = errno;
    ::close(fd);
  } else if (errno != ENOENT) {  // ENOENT: the connection is gone already (a dead mount)
    err = errno;
  }
  if (mounted_fusectl) ::umount2(kConnections, 0);
  if (err) throw Error(err, "aborting the FUSE connection through " + abort);
  if (::umount2(path.c_str(), MNT_DETACH) != 0)
    throw Error(errno, fmt::format("detaching {}", path));
  fmt::print(
      "txnfs: {}: {}; mount point detached (the next txnfs mount rolls back what "
      "was open)\n",
      path,
      aborted ? fmt::format("FUSE connection {} aborted", m->connection)
              : std::string("its daemon was gone"));
  return 0;
}

}  // namespace txnfs::cli
