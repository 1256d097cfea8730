#include "txnfuse/txn/committed_view.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

namespace txnfs {

void CommittedView::record(uint64_t txid, uint64_t dir, const std::string &name,
                           EntryBefore before) {
  MutexLock g(mu_);
  auto [it, inserted] = dirs_[dir].try_emplace(name, txid, std::move(before));
  if (inserted) by_txn_[txid].push_back({dir, name});
}

void CommittedView::forget(uint64_t txid) {
  MutexLock g(mu_);
  forgotten_.fetch_add(1, std::memory_order_acq_rel);
  std::erase_if(objects_, [&](auto &kv) { return kv.second.txid == txid; });
  auto t = by_txn_.find(txid);
  if (t == by_txn_.end()) return;
  for (auto &[dir, name] : t->second) {
    auto d = dirs_.find(dir);
    if (d == dirs_.end()) continue;
    d->second.erase(name);
    if (d->second.empty()) dirs_.erase(d);
  }
  by_txn_.erase(t);
}

std::optional<EntryBefore> CommittedView::before(uint64_t dir, const std::string &name) {
  MutexLock g(mu_);
  auto d = dirs_.find(dir);
  if (d == dirs_.end()) return std::nullopt;
  auto e = d->second.find(name);
  if (e == d->second.end()) return std::nullopt;
  return e->second.second;
}

std::optional<uint64_t> CommittedView::committed_parent(uint64_t ino) {
  MutexLock g(mu_);
  for (auto &[dir, names] : dirs_)
    for (auto &[name, v] : names)
      if (v.second.existed && v.second.ino == ino) return dir;
  return std::nullopt;
}

std::map<std::string, EntryBefore> CommittedView::in_dir(uint64_t dir) {
  MutexLock g(mu_);
  std::map<std::string, EntryBefore> out;
  auto d = dirs_.find(dir);
  if (d != dirs_.end())
    for (auto &[name, v] : d->second) out.emplace(name, v.second);
  return out;
}

bool CommittedView::empty() {
  MutexLock g(mu_);
  return dirs_.empty();
}

}  // namespace txnfs

namespace txnfs {

void CommittedView::note_attrs(uint64_t txid, uint64_t nodeid, const struct stat &st, int log_fd) {
  MutexLock g(mu_);
  objects_.try_emplace(nodeid, Noted{txid, log_fd, ObjectState{st, {}, {}}});
}

void CommittedView::note_range(uint64_t nodeid, uint64_t off, uint64_t end, std::string obj) {
  MutexLock g(mu_);
  auto it = objects_.find(nodeid);
  if (it != objects_.end()) it->second.state.ranges[off] = {end, std::move(obj)};
}

void CommittedView::note_xattrs(uint64_t nodeid, std::string obj) {
  MutexLock g(mu_);
  auto it = objects_.find(nodeid);
  if (it != objects_.end()) it->second.state.xattrs = std::move(obj);
}

std::optional<ObjectBefore> CommittedView::object(uint64_t nodeid) {
  MutexLock g(mu_);
  auto it = objects_.find(nodeid);
  if (it == objects_.end()) return std::nullopt;
  ObjectBefore b;
  static_cast<ObjectState &>(b) = it->second.state;
  b.log.reset(::fcntl(it->second.log_fd, F_DUPFD_CLOEXEC, 0));  // the log may close once we unlock
  return b;
}

int CommittedView::read(uint64_t nodeid, int fd, char *buf, size_t size, off_t off, size_t *len) {
  int err = 0;
  if (!until_quiet([&] { return (err = read_once(nodeid, fd, buf, size, off, len)) != EAGAIN; }))
    return EIO;
  return err;
}

int CommittedView::read_once(uint64_t nodeid, int fd, char *buf, size_t size, off_t off,
                             size_t *out) {
  ssize_t n = ::pread(fd, buf, size, off);
  if (n < 0) return errno;
  auto b = object(nodeid);
  if (!b) {
    *out = size_t(n);
    return 0;
  }
  uint64_t committed = uint64_t(b->st.st_size), start = uint64_t(off);
  size_t len = start >= committed ? 0 : size_t(std::min<uint64_t>(size, committed - start));
  if (size_t(n) < len) std::fill(buf + n, buf + len, 0);
  for (auto &[a, v] : b->ranges) {
    uint64_t lo = std::max(a, start), hi = std::min(v.first, start + len);
    if (lo >= hi) continue;
    UniqueFd dfd(::openat(b->log.get(), v.second.c_str(), O_RDONLY | O_CLOEXEC));
    if (!dfd) return EAGAIN;  // the transaction committed meanwhile: read again
    if (::pread(dfd.get(), buf + (lo - start), hi - lo, off_t(lo)) < 0) return EIO;
  }
  *out = len;
  return 0;
}

bool CommittedView::attrs(uint64_t nodeid, int fd, struct stat &st) {
  bool replaced = false;
  until_quiet([&] {
    struct stat tree;
    if (::fstatat(fd, "", &tree, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return true;
    auto b = object(nodeid);
    replaced = b.has_value();
    st = replaced ? b->st : tree;
    return true;
  });
  return !replaced;
}

ssize_t CommittedView::read_xattrs(uint64_t nodeid, int fd,
                                   const std::function<ssize_t(int)> &read) {
  ssize_t n = -1;
  int err = EIO;
  bool done = until_quiet([&] {
    n = read(fd);
    err = errno;
    auto b = object(nodeid);
    if (b && !b->xattrs.empty()) {
      UniqueFd snap(::openat(b->log.get(), b->xattrs.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
      if (!snap) return false;  // its transaction is ending (the log goes first)
      n = read(snap.get());
      err = errno;
    }
    return true;
  });
  errno = done ? err : EIO;
  return done ? n : -1;
}

CommittedListing CommittedView::listing(uint64_t dir, DIR *dp) {
  CommittedListing out;
  until_quiet([&] {
    out = listing_once(dir, dp);
    return true;
  });
  return out;
}

std::vector<ListedEntry> CommittedView::tree_listing(DIR *dp) {
  std::vector<ListedEntry> out;
  ::rewinddir(dp);
  while (dirent *e = ::readdir(dp))
    out.push_back({e->d_name, e->d_ino, mode_t(e->d_type) << 12, uint32_t(e->d_off)});
  return out;
}

CommittedListing CommittedView::listing_once(uint64_t dir, DIR *dp) {
  CommittedListing out;
  out.entries = tree_listing(dp);
  auto changed = in_dir(dir);
  out.changed = !changed.empty();
  if (!out.changed) return out;
  std::map<std::string, size_t> index;
  for (size_t k = 0; k < out.entries.size(); k++) index[out.entries[k].name] = k;
  for (auto &[name, b] : changed) {
    auto it = index.find(name);
    if (it != index.end()) out.entries[it->second].name.clear();  // hidden below
    if (b.existed) out.entries.push_back({name, b.ino, b.type});
  }
  std::erase_if(out.entries, [](const ListedEntry &e) { return e.name.empty(); });
  return out;
}

}  // namespace txnfs
