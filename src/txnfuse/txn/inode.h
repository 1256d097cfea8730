// Inode — one backing object as the kernel knows it (by nodeid), held open.
//
// Invariant: while an Inode lives it holds an O_PATH fd to its backing object, so the
// backing inode number cannot be reused by another object; that is what makes
// nodeid = backing inode number safe (see schema.sql). The daemon's InodeTable
// (fuse/inode_table.h) keeps one per nodeid the kernel holds; the transaction core
// reads the identity and the fd.
#pragma once
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "store/backing.h"

namespace txnfs {

struct Inode {
  int fd = -1;  // O_PATH, O_NOFOLLOW fd to the backing object
  uint64_t nodeid = 0;
  uint64_t generation = 0;
  uint64_t ino = 0;  // backing inode number
  std::string fh;    // backing file handle (see store/backing.h)
  mode_t type = 0;   // S_IFMT bits
  uint64_t nlookup = 0;  // guarded by the InodeTable's mutex (not annotated: another object's)
  // Set once a transaction has changed the object: plain opens of it then bypass the
  // page cache (a transaction's writes move the kernel's shared file size).
  mutable std::atomic<bool> txn_written{false};
  // Set when an aborted transaction's creation of the object is undone: the object
  // never existed, and every request through its nodeid or an open file of it answers
  // ESTALE -- the backing inode it still holds is unlinked, and a write acknowledged
  // into it would be lost. (An object removed by a plain unlink is different: POSIX
  // keeps it usable through open files.)
  std::atomic<bool> gone{false};

  Inode() = default;
  Inode(const Inode &) = delete;
  Inode &operator=(const Inode &) = delete;
  ~Inode() {
    if (fd >= 0) ::close(fd);
  }
};

using InodePtr = std::shared_ptr<Inode>;

// An Inode for the object behind `fd` (O_PATH, O_NOFOLLOW), which it takes over;
// `st` is that object's stat, `nodeid` the one the kernel sees for it.
inline InodePtr make_inode(int fd, uint64_t nodeid, const struct stat &st) {
  auto i = std::make_shared<Inode>();
  i->fd = fd;
  BackingId id = backing_id(fd);
  i->ino = st.st_ino;
  i->nodeid = nodeid;
  i->type = st.st_mode & S_IFMT;
  i->generation = id.generation;
  i->fh = id.fh;
  return i;
}

}  // namespace txnfs
