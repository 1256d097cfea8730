#include "txnfuse/txn/fd_cache.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>

#include "store/backing.h"
#include "txnfuse/txn/inode.h"

namespace txnfs {

size_t FdCache::default_capacity() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_max == RLIM_INFINITY)
    return kMaxDefaultCapacity;
  return std::clamp(size_t(rl.rlim_max / 2), size_t(64), kMaxDefaultCapacity);
}

void FdCache::set_capacity(size_t n) {
  Lru dropped;
  MutexLock g(mu_);
  capacity_ = n ? n : 1;
  while (lru_.size() > capacity_) {
    map_.erase(lru_.back().first.ino);
    dropped.splice(dropped.end(), lru_, std::prev(lru_.end()));
  }
}

size_t FdCache::capacity() {
  MutexLock g(mu_);
  return capacity_;
}

size_t FdCache::size() {
  MutexLock g(mu_);
  return lru_.size();
}

FdCache::Key FdCache::key_of(const Inode &i) { return Key{i.ino, i.generation}; }

FdCache::Fd FdCache::insert_locked(const Key &k, Fd fd, Lru &dropped) {
  auto [it, inserted] = map_.try_emplace(k.ino);
  if (!inserted) {
    if (it->second->first == k) {  // another request opened it meanwhile: keep theirs
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
    // Another generation: not expected (the entry's fd would have kept the inode
    // number from passing to `fd`'s object), but `fd` was just opened: it is the live one.
    dropped.splice(dropped.end(), lru_, it->second);
  }
  lru_.emplace_front(k, fd);
  it->second = lru_.begin();
  while (lru_.size() > capacity_) {
    map_.erase(lru_.back().first.ino);
    dropped.splice(dropped.end(), lru_, std::prev(lru_.end()));
  }
  return fd;
}

InodeFd FdCache::pin(int mount_fd, const Inode &i) {
  Key k = key_of(i);
  {
    MutexLock g(mu_);
    if (auto it = map_.find(k.ino); it != map_.end() && it->second->first == k) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return InodeFd(it->second->second);
    }
  }
  // Opened outside the lock: a syscall that may read the inode from disk.
  UniqueFd fd = open_by_fh(mount_fd, i.fh, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (!fd) return InodeFd(fd.err());
  return adopt(i, std::move(fd));
}

InodeFd FdCache::adopt(const Inode &i, UniqueFd fd) {
  Lru dropped;  // destroyed after the lock is released: close() outside it
  Fd mine = std::make_shared<const UniqueFd>(std::move(fd));
  MutexLock g(mu_);
  return InodeFd(insert_locked(key_of(i), std::move(mine), dropped));
}

void FdCache::drop_unlinked(uint64_t ino) {
  Fd fd;
  {
    MutexLock g(mu_);
    auto it = map_.find(ino);
    if (it == map_.end()) return;
    fd = it->second->second;
  }
  // (Outside the lock, as every syscall here. A link count of 0 is final: no call
  // gives an object that lost its last name a new one, O_TMPFILE aside.)
  struct stat st;
  if (::fstat(fd->get(), &st) != 0 || st.st_nlink != 0) return;
  Lru dropped;  // closed after the lock is released (with `fd`, if no request pins it)
  MutexLock g(mu_);
  auto it = map_.find(ino);
  if (it == map_.end() || it->second->second != fd) return;
  dropped.splice(dropped.end(), lru_, it->second);
  map_.erase(it);
}

}  // namespace txnfs
