// FdCache — O_PATH fds to backing objects, opened from their file handles on demand.
//
// The daemon knows an object by its Inode (txn/inode.h), which holds the object's
// backing file handle but no fd: a tree of any size costs no file descriptors. A
// request that needs an fd pins one here (FdCache::pin): a hit returns the fd an
// earlier request opened, a miss opens it with open_by_handle_at on the tree's mount.
//
// Invariants:
//   - at most capacity() fds are held idle, the least recently pinned ones go first;
//   - a pinned fd (an InodeFd alive) is never closed: eviction only drops the cache's
//     reference, and the fd closes with the last InodeFd that holds it. So the
//     daemon's open O_PATH fds are capacity() plus those pinned by running requests;
//   - entries are keyed by the backing identity (ino, generation), never by nodeid or
//     name: an fd in the cache always refers to the object its key names, and a key
//     whose object is gone misses and answers ESTALE (XFS checks the generation).
//     There is at most one entry per inode number: while the cache holds an object's
//     fd its inode number cannot pass to another object;
//   - an fd keeps its object's blocks allocated after the object's last name is gone,
//     as an open file does, so the cache holds no fd to an object with no name (link
//     count 0) that nothing can reach any more: drop_unlinked() lets go of it when the
//     kernel forgets the object (Fs::forget), when the transaction that removed it ends
//     (a durable commit drops its stash in the undo log, TxnManager::after_durable), and
//     when an abort removes what its transaction made. While the kernel still knows a
//     removed object (an open file, an O_PATH fd, a working directory in it) the fd
//     stays, and its blocks stay as they would on XFS; an open file's own fd holds them
//     then anyway. A hard link elsewhere or a stash in an open transaction's undo log
//     is a name: such an object stays cached.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "store/unique_fd.h"
#include "sync/mutex.h"

namespace txnfs {

struct Inode;

// A pinned O_PATH fd (or the errno that kept one from being opened). While it lives
// the fd stays open, whatever the cache evicts.
class InodeFd {
 public:
  InodeFd() = default;
  explicit InodeFd(int err) : err_(err) {}
  explicit InodeFd(std::shared_ptr<const UniqueFd> fd) : fd_(std::move(fd)) {}

  int get() const { return fd_ ? fd_->get() : -1; }
  // ESTALE when the object is gone, else the errno open_by_handle_at failed with.
  int err() const { return fd_ ? 0 : err_; }
  explicit operator bool() const { return fd_ != nullptr; }

 private:
  std::shared_ptr<const UniqueFd> fd_;
  int err_ = ESTALE;
};

class FdCache {
 public:
  explicit FdCache(size_t capacity = default_capacity()) : capacity_(capacity ? capacity : 1) {}
  FdCache(const FdCache &) = delete;
  FdCache &operator=(const FdCache &) = delete;

  // Half the RLIMIT_NOFILE the process may raise itself to (the hard limit), leaving
  // the other half to open files, libfuse's worker threads (a /dev/fuse clone and a
  // splice pipe each), the undo logs and SQLite; at least 64, at most
  // kMaxDefaultCapacity (an O_PATH fd costs the kernel a struct file; reopening an
  // evicted one by handle is cheap).
  static constexpr size_t kMaxDefaultCapacity = 65536;
  static size_t default_capacity();

  void set_capacity(size_t n) EXCLUDES(mu_);
  size_t capacity() EXCLUDES(mu_);
  size_t size() EXCLUDES(mu_);  // fds held by the cache (idle or pinned)

  // An O_PATH | O_NOFOLLOW fd to the object `i` names, opened (on a miss) by its file
  // handle on `mount_fd`'s file system.
  InodeFd pin(int mount_fd, const Inode &i) EXCLUDES(mu_);
  // Hands the cache an O_PATH fd a request already has for `i` (a fresh lookup), so
  // the next pin does not open it again. Returns it pinned.
  InodeFd adopt(const Inode &i, UniqueFd fd) EXCLUDES(mu_);
  // Drops the entry of backing inode `ino` if its object has no name left (st_nlink
  // 0). Requests that pinned it keep it until they end; a later pin opens it by
  // handle again (which works while something else holds it, and answers ESTALE once
  // it is freed).
  void drop_unlinked(uint64_t ino) EXCLUDES(mu_);

 private:
  struct Key {
    uint64_t ino, generation;
    bool operator==(const Key &) const = default;
  };
  using Fd = std::shared_ptr<const UniqueFd>;
  using Lru = std::list<std::pair<Key, Fd>>;  // front: most recently pinned

  static Key key_of(const Inode &i);
  // Inserts (or finds) `fd` under `k`, replacing an entry of another generation; the
  // evicted fds go to `dropped`, closed by the caller after the lock is released
  // (unless still pinned).
  Fd insert_locked(const Key &k, Fd fd, std::list<std::pair<Key, Fd>> &dropped) REQUIRES(mu_);

  Mutex mu_{LockRank::kFdCache};  // a leaf (src/sync/lock_order.h)
  size_t capacity_ GUARDED_BY(mu_);
  Lru lru_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Lru::iterator> map_ GUARDED_BY(mu_);  // by Key::ino
};

}  // namespace txnfs
