#include "compound_bridge/client/journal_dir.h"

#include <cerrno>
#include <cstring>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

namespace txnfs::nfs {
namespace {

constexpr const char *kStateFile = "journal";
constexpr const char *kLockFile = "lock";

std::string errno_text() { return std::strerror(errno); }

std::vector<std::string> names_in(int dir_fd, const std::string &dir) {
  int fd = dup(dir_fd);
  DIR *d = fd < 0 ? nullptr : fdopendir(fd);
  if (d == nullptr) {
    if (fd >= 0) ::close(fd);
    throw Error(fmt::format("journal {}: cannot list it: {}", dir, errno_text()));
  }
  rewinddir(d);
  std::vector<std::string> names;
  while (dirent *e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  closedir(d);
  return names;
}

std::string read_all(int dir_fd, const std::string &name, const std::string &what) {
  int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{}: cannot open: {}", what, errno_text()));
  std::string bytes;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      throw Error(fmt::format("{}: cannot read: {}", what, errno_text()));
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return bytes;
}

}  // namespace

JournalDir::JournalDir(const std::string &dir) : dir_(dir) {
  if (dir_.empty()) throw Error("journal: empty directory name");
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
    throw Error(fmt::format("journal {}: cannot create it: {}", dir_, errno_text()));
  }
  dir_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0) {
    throw Error(
        fmt::format("journal {}: {}", dir_, errno == ENOTDIR ? "not a directory" : errno_text()));
  }
  try {
    std::vector<std::string> names = names_in(dir_fd_, dir_);
    bool has_state = false;
    for (const std::string &n : names) has_state = has_state || n == kStateFile;
    if (!has_state) {
      for (const std::string &n : names) {
        if (n != kLockFile) {
          throw Error(
              fmt::format("journal {}: not a txnfs-nfs journal (no {} file, and the "
                          "directory is not empty: it holds {})",
                          dir_, kStateFile, n));
        }
      }
    }
    lock_fd_ = openat(dir_fd_, kLockFile, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd_ < 0)
      throw Error(fmt::format("journal {}: cannot open its lock: {}", dir_, errno_text()));
    while (flock(lock_fd_, LOCK_EX) != 0) {
      if (errno != EINTR)
        throw Error(fmt::format("journal {}: cannot lock it: {}", dir_, errno_text()));
    }
    // Under the lock: another process may have created the state meanwhile.
    if (faccessat(dir_fd_, kStateFile, F_OK, 0) != 0) {
      save_state({.id = new_journal_id()});
    }
    scan();
  } catch (...) {
    if (lock_fd_ >= 0) ::close(lock_fd_);
    ::close(dir_fd_);
    throw;
  }
}

JournalDir::~JournalDir() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

void JournalDir::scan() {
  try {
    state_ = decode_state(read_all(dir_fd_, kStateFile, dir_ + "/" + kStateFile));
  } catch (const Error &e) {
    throw Error(fmt::format("journal {}/{}: {}", dir_, kStateFile, e.what()));
  }
  std::set<uint64_t> pending;
  for (const std::string &n : names_in(dir_fd_, dir_)) {
    if (n == kStateFile || n == kLockFile) continue;
    if (n.ends_with(".tmp")) {  // a write that did not finish
      unlink_file(n);
      continue;
    }
    std::optional<EntryName> e = parse_entry_name(n);
    if (!e) throw Error(fmt::format("journal {}: unexpected file {}", dir_, n));
    if (e->seq <= state_.durable) {  // a sync stopped before removing it
      unlink_file(n);
      continue;
    }
    (e->pending ? pending : kept_).insert(e->seq);
  }
  for (uint64_t p : std::set<uint64_t>(pending)) {
    if (kept_.contains(p)) {  // the send finished; only the unlink was lost
      unlink_file(entry_name(p, true));
      pending.erase(p);
    }
  }
  if (pending.size() > 1 ||
      (!pending.empty() && !kept_.empty() && *pending.begin() < *kept_.rbegin())) {
    throw Error(fmt::format("journal {}: garbled: a pending entry that is not the latest", dir_));
  }
  if (!pending.empty()) pending_ = *pending.begin();
  sync_dir();
}

void JournalDir::save_state(const JournalState &s) {
  write_file(kStateFile, encode_state(s));
  state_ = s;
}

uint64_t JournalDir::next() const {
  uint64_t n = state_.next;
  if (!kept_.empty()) n = std::max(n, *kept_.rbegin() + 1);
  if (pending_) n = std::max(n, *pending_ + 1);
  return n;
}

JournalEntry JournalDir::load(uint64_t seq, bool pending) const {
  std::string name = entry_name(seq, pending);
  std::string what = dir_ + "/" + name;
  JournalEntry e;
  try {
    e = decode_entry(read_all(dir_fd_, name, what));
  } catch (const Error &ex) {
    throw Error(fmt::format("journal entry {}: {}", what, ex.what()));
  }
  if (e.seq != seq)
    throw Error(fmt::format("journal entry {}: holds sequence number {}", what, e.seq));
  return e;
}

void JournalDir::save(const JournalEntry &e, bool pending) {
  write_file(entry_name(e.seq, pending), encode_entry(e));
  if (pending) {
    pending_ = e.seq;
    return;
  }
  kept_.insert(e.seq);
  if (pending_ == e.seq) remove(e.seq, true);
}

void JournalDir::remove(uint64_t seq, bool pending) {
  unlink_file(entry_name(seq, pending));
  sync_dir();
  if (pending && pending_ == seq) pending_.reset();
  if (!pending) kept_.erase(seq);
}

void JournalDir::keep_pending() {
  if (!pending_) return;
  uint64_t seq = *pending_;
  if (renameat(dir_fd_, entry_name(seq, true).c_str(), dir_fd_, entry_name(seq, false).c_str()) !=
      0) {
    throw Error(fmt::format("journal {}: cannot rename entry {}: {}", dir_, seq, errno_text()));
  }
  sync_dir();
  pending_.reset();
  kept_.insert(seq);
}

void JournalDir::write_file(const std::string &name, std::string_view bytes) {
  std::string tmp = name + ".tmp";
  int fd = openat(dir_fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw Error(fmt::format("journal {}: cannot create {}: {}", dir_, tmp, errno_text()));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    done += static_cast<size_t>(n);
  }
  bool ok = done == bytes.size() && fsync(fd) == 0;
  std::string why = ok ? "" : errno_text();
  ::close(fd);
  if (!ok || renameat(dir_fd_, tmp.c_str(), dir_fd_, name.c_str()) != 0) {
    if (ok) why = errno_text();
    unlinkat(dir_fd_, tmp.c_str(), 0);
    throw Error(fmt::format("journal {}: cannot write {}: {}", dir_, name, why));
  }
  sync_dir();
}

void JournalDir::unlink_file(const std::string &name) {
  if (unlinkat(dir_fd_, name.c_str(), 0) != 0 && errno != ENOENT) {
    throw Error(fmt::format("journal {}: cannot remove {}: {}", dir_, name, errno_text()));
  }
}

void JournalDir::sync_dir() {
  if (fsync(dir_fd_) != 0) throw Error(fmt::format("journal {}: fsync: {}", dir_, errno_text()));
}

}  // namespace txnfs::nfs
