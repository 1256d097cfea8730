#include "txnfuse/fuse/mount_options.h"

#include <sys/mount.h>

#include <algorithm>
#include <iterator>

#ifndef MS_NOSYMFOLLOW
#define MS_NOSYMFOLLOW 256
#endif

namespace txnfs {

namespace {

// mount(8)'s mount flags: what each sets and clears. The atime modes exclude each other
// (the last one given wins; the kernel's default is relatime).
struct FlagOption {
  const char *name;
  unsigned long set, clear;
};
constexpr unsigned long kAtimeModes = MS_NOATIME | MS_RELATIME | MS_STRICTATIME;
constexpr FlagOption kFlagOptions[] = {
    {"ro", MS_RDONLY, 0},
    {"rw", 0, MS_RDONLY},
    {"nosuid", MS_NOSUID, 0},
    {"suid", 0, MS_NOSUID},
    {"nodev", MS_NODEV, 0},
    {"dev", 0, MS_NODEV},
    {"noexec", MS_NOEXEC, 0},
    {"exec", 0, MS_NOEXEC},
    {"sync", MS_SYNCHRONOUS, 0},
    {"async", 0, MS_SYNCHRONOUS},
    {"dirsync", MS_DIRSYNC, 0},
    {"noatime", MS_NOATIME, kAtimeModes},
    {"atime", 0, MS_NOATIME},
    {"relatime", MS_RELATIME, kAtimeModes},
    {"norelatime", 0, MS_RELATIME},
    {"strictatime", MS_STRICTATIME, kAtimeModes},
    {"nostrictatime", 0, MS_STRICTATIME},
    {"nodiratime", MS_NODIRATIME, 0},
    {"diratime", 0, MS_NODIRATIME},
    {"lazytime", MS_LAZYTIME, 0},
    {"nolazytime", 0, MS_LAZYTIME},
    {"nosymfollow", MS_NOSYMFOLLOW, 0},
    {"symfollow", 0, MS_NOSYMFOLLOW},
};
constexpr unsigned long kAllFlags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_SYNCHRONOUS |
                                    MS_DIRSYNC | kAtimeModes | MS_NODIRATIME | MS_LAZYTIME |
                                    MS_NOSYMFOLLOW;
// What libfuse's mount cannot express (relatime needs nothing: it is the default).
constexpr unsigned long kLibfuseLacks = MS_STRICTATIME | MS_LAZYTIME;

// Splits `list` at commas that no backslash escapes; the pieces keep their escapes.
void split(const std::string &list, std::vector<std::string> &out) {
  std::string cur;
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i] == '\\' && i + 1 < list.size()) {
      cur += list[i];
      cur += list[++i];
    } else if (list[i] == ',') {
      out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += list[i];
    }
  }
  out.push_back(std::move(cur));
}

std::string unescape(const std::string &s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += s[i] == '\\' && i + 1 < s.size() ? s[++i] : s[i];
  return out;
}

std::string escape(const std::string &s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == ',') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

MountFlags parse_mount_options(const std::vector<std::string> &lists, bool root) {
  MountFlags f;
  if (!root) f.ms = MS_NOSUID | MS_NODEV;  // fusermount3 adds them anyway
  std::vector<std::string> opts;
  for (auto &list : lists) split(list, opts);
  for (auto &o : opts) {
    if (o.empty()) continue;
    if (o == "io_uring") {
      f.io_uring = true;
      continue;
    }
    if (o == "nopassthrough") {
      f.nopassthrough = true;
      continue;
    }
    if (o.rfind("fsname=", 0) == 0) {
      f.fsname = unescape(o.substr(7));
      continue;
    }
    auto flag = std::find_if(std::begin(kFlagOptions), std::end(kFlagOptions),
                             [&](const FlagOption &x) { return o == x.name; });
    if (flag == std::end(kFlagOptions)) {
      f.other.push_back(o);
      continue;
    }
    f.ms = (f.ms & ~flag->clear) | flag->set;
  }
  return f;
}

std::string libfuse_options(const MountFlags &f, const std::string &base,
                            const std::string &source) {
  std::string o = base + ",fsname=" + escape(f.fsname.empty() ? source : f.fsname);
  auto add = [&](const char *name) { (o += ',') += name; };
  // Each flag explicitly: libfuse starts from nosuid,nodev.
  add(f.ms & MS_RDONLY ? "ro" : "rw");
  add(f.ms & MS_NOSUID ? "nosuid" : "suid");
  add(f.ms & MS_NODEV ? "nodev" : "dev");
  add(f.ms & MS_NOEXEC ? "noexec" : "exec");
  add(f.ms & MS_SYNCHRONOUS ? "sync" : "async");
  if (f.ms & MS_DIRSYNC) add("dirsync");
  if (f.ms & MS_NOATIME) add("noatime");
  if (f.ms & MS_NODIRATIME) add("nodiratime");
  if (f.ms & MS_NOSYMFOLLOW) add("nosymfollow");
  for (auto &x : f.other) add(x.c_str());
  return o;
}

unsigned long flags_libfuse_lacks(const MountFlags &f) { return f.ms & kLibfuseLacks; }

unsigned long remount_flags(const MountFlags &f) { return MS_REMOUNT | (f.ms & kAllFlags); }

}  // namespace txnfs
