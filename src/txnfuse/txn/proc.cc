#include "txnfuse/txn/proc.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>

#include <fstream>
#include <string>

namespace txnfs {

std::pair<pid_t, pid_t> tgid_ppid(pid_t tid) {
  std::ifstream f("/proc/" + std::to_string(tid) + "/status");
  std::string line;
  pid_t tgid = 0, ppid = 0;
  while (std::getline(f, line)) {
    if (line.rfind("Tgid:", 0) == 0) tgid = pid_t(std::stol(line.substr(5)));
    else if (line.rfind("PPid:", 0) == 0) ppid = pid_t(std::stol(line.substr(5)));
  }
  return {tgid, ppid};
}

uid_t owner_of_process(pid_t pid) {
  struct stat st;
  return ::stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0 ? st.st_uid : uid_t(-1);
}

namespace {
std::string link_of(const std::string &path) {
  char buf[PATH_MAX];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}
}  // namespace

std::optional<bool> has_capability(pid_t tid, int cap) {
  std::string dir = "/proc/" + std::to_string(tid);
  std::ifstream f(dir + "/status");
  std::string line;
  std::optional<bool> has;
  while (std::getline(f, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    try {
      has = (std::stoull(line.substr(7), nullptr, 16) >> cap) & 1;
    } catch (const std::exception &) {
      return std::nullopt;
    }
    break;
  }
  if (has && *has) {
    static const std::string own_ns = link_of("/proc/self/ns/user");
    std::string ns = link_of(dir + "/ns/user");
    if (ns.empty()) return std::nullopt;
    if (ns != own_ns) return false;
  }
  return has;
}

std::optional<bool> has_open_for_writing(pid_t tid, ino_t ino) {
  std::string dir = "/proc/" + std::to_string(tid) + "/fdinfo";
  DIR *d = ::opendir(dir.c_str());
  if (!d) return std::nullopt;
  bool found = false;
  while (struct dirent *e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    // "pos: ...", "flags: 0100002" (octal), "mnt_id: ...", "ino: ..."
    std::ifstream f(dir + "/" + e->d_name);
    std::string line;
    unsigned long flags = 0;
    bool same = false;
    while (std::getline(f, line)) {
      if (line.rfind("flags:", 0) == 0) flags = std::stoul(line.substr(6), nullptr, 8);
      else if (line.rfind("ino:", 0) == 0) same = std::stoull(line.substr(4)) == uint64_t(ino);
    }
    if (same && (flags & O_ACCMODE) != O_RDONLY) {
      found = true;
      break;
    }
  }
  ::closedir(d);
  return found;
}

}  // namespace txnfs
