// Inode — one backing object as the kernel knows it (by nodeid).
//
// Invariants:
//   - an Inode names its backing object by file handle (fh: inode number and
//     generation on XFS) and holds no fd: a request pins an O_PATH fd through the
//     FdCache (txn/fd_cache.h, TxnEnv::pin), which opens it by handle on demand. So
//     the daemon's file descriptors do not grow with the number of objects the kernel
//     knows;
//   - holding no fd, an Inode does not keep its backing inode alive: once the object
//     is removed and nothing else holds it (an open file does), XFS may give its inode
//     number, which is the nodeid (see schema.sql), to a new object. (nodeid,
//     generation) still never names two objects: every entry reply carries the
//     backing generation, and the kernel treats a known nodeid arriving with another
//     generation as a new inode (its iget marks the old one bad as stale).
//     The daemon does the same: the InodeTable replaces an entry whose generation
//     differs (inode_table.h), and a pin of the old Inode answers ESTALE because XFS
//     checks the generation in the handle.
// The daemon's InodeTable (fuse/inode_table.h) keeps one per nodeid the kernel holds;
// the transaction core reads the identity and pins fds.
#pragma once
#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "store/backing.h"
#include "store/error.h"

namespace txnfs {

// A serialized backing file handle (store/backing.h) kept inside the Inode: XFS and
// ext4 handles are 8 or 12 bytes plus the 4-byte type, so a heap string per Inode
// would cost more than the handle. Converts to the std::string the rest of the code
// passes handles as.
class InlineFh {
 public:
  InlineFh() = default;
  InlineFh &operator=(std::string_view s) {
    if (s.size() > sizeof bytes_)
      throw Error("backing file handle of " + std::to_string(s.size()) + " bytes",
                  "the store must live on XFS (or ext4)");
    len_ = uint8_t(s.size());
    std::memcpy(bytes_, s.data(), s.size());
    return *this;
  }
  std::string_view view() const { return {bytes_, len_}; }
  operator std::string() const { return std::string(view()); }  // NOLINT: implicit on purpose
  bool operator==(std::string_view s) const { return view() == s; }

 private:
  uint8_t len_ = 0;
  char bytes_[19] = {};
};

// One per object the kernel knows: its size is the daemon's memory per file of a large
// tree (with the shared_ptr control block and the InodeTable's slot).
struct Inode {
  uint64_t nodeid = 0;
  uint64_t ino = 0;         // backing inode number
  uint64_t nlookup = 0;     // guarded by the InodeTable's mutex (not annotated: another object's)
  uint32_t generation = 0;  // backing generation (32 bits on XFS and ext4, see backing.cc)
  uint16_t type = 0;        // S_IFMT bits
  // Set once a transaction has changed the object, or a plain open wrote it with
  // O_DIRECT (direct_writer in fuse/fs.h): plain opens of it then bypass the page cache
  // (a transaction's writes move the kernel's shared file size; the kernel leaves pages
  // read during a direct write stale).
  mutable std::atomic<bool> txn_written{false};
  // Set when an aborted transaction's creation of the object is undone: the object
  // never existed, and every request through its nodeid or an open file of it answers
  // ESTALE -- the backing inode may still exist unlinked (an open file holds it), and
  // a write acknowledged into it would be lost. (An object removed by a plain unlink
  // is different: POSIX keeps it usable through open files.)
  std::atomic<bool> gone{false};
  // Set for good once a READ of whole pages arrived: the kernel may cache pages of the
  // object although its opens bypass the page cache (mmap faults read through it), so
  // a transaction that opened the object for writing may have dirty pages in a shared
  // mapping (TxnManager::write_back_mapped). A read(2) of whole pages sets it too: it
  // only costs that transaction's commit one invalidation of the object.
  std::atomic<bool> paged{false};
  // Set for good before the kernel may first cache a listing of the directory
  // (op_opendir, cache_readdir): while it is clear the kernel holds no page of the
  // directory, so invalidating its attributes is all an invalidation of it needs, and that
  // waits for no kernel lock (CacheInvalidator::quick).
  std::atomic<bool> listing_cached{false};
  // A directory's default ACL as creations in it last found it (creation_mode): kNoAcl,
  // kAcl, or kUnknown (not read yet, or an xattr of it changed since: op_setxattr and
  // op_removexattr reset it, and a rollback that restored its xattrs, before its locks
  // go: CacheInvalidator::xattrs_restored). Only the daemon changes the tree's xattrs.
  enum : int8_t { kUnknown = -1, kNoAcl = 0, kAcl = 1 };
  std::atomic<int8_t> default_acl{kUnknown};
  InlineFh fh;  // backing file handle (see store/backing.h)

  Inode() = default;
  Inode(const Inode &) = delete;
  Inode &operator=(const Inode &) = delete;
};

static_assert(sizeof(Inode) <= 56, "an Inode per known object: keep it small");

using InodePtr = std::shared_ptr<Inode>;

// An Inode for the object behind `fd` (O_PATH, O_NOFOLLOW; read only, not kept: hand
// it to the FdCache to reuse it); `st` is that object's stat, `nodeid` the one the
// kernel sees for it.
inline InodePtr make_inode(int fd, uint64_t nodeid, const struct stat &st) {
  auto i = std::make_shared<Inode>();
  BackingId id = backing_id(fd, st);
  i->ino = st.st_ino;
  i->nodeid = nodeid;
  i->type = uint16_t(st.st_mode & S_IFMT);
  i->generation = uint32_t(id.generation);
  i->fh = id.fh;
  return i;
}

}  // namespace txnfs
