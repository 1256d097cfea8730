// MNT/.txnfs: the directory of views. Its entry "ID" is the root of transaction ID's
// view (views.h), reachable by the transaction's owner and root only: another user gets
// EACCES, never a look at uncommitted state. The entry gets no cache lifetime, so every
// walk through it is asked again (a cached dentry would let anyone through). The
// directory lists nothing: which transactions are open is `txnfs status`'s business.
// Its names "~N" (N: a kernel nodeid in hex) serve the daemon's own revocation of an ended
// view's passthrough opens (Invalidator::revoke); to anyone else they do not exist.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <string>

#include "txnfuse/fuse/fs.h"
#include "txnfuse/fuse/views.h"
#include "txnfuse/txn/txn.h"

namespace txnfs::views_dir {

namespace {

const time_t kBorn = ::time(nullptr);

struct stat dir_stat() {
  struct stat st {};
  st.st_ino = Views::kDirNodeid;
  st.st_mode = S_IFDIR | 0555;
  st.st_nlink = 2;
  st.st_atime = st.st_mtime = st.st_ctime = kBorn;
  return st;
}

}  // namespace

bool lookup_in_root(fuse_req_t req, uint32_t slot, const char *name) {
  if (std::strcmp(name, Views::kDirName) != 0) return false;
  if (slot != 0) {  // a view shows the tree alone
    fuse_entry_param e{};
    e.entry_timeout = fs_of(req).opts.entry_timeout;
    fuse_reply_entry(req, &e);
    return true;
  }
  fuse_entry_param e{};
  e.ino = Views::kDirNodeid;
  e.attr = dir_stat();
  e.attr_timeout = e.entry_timeout = fs_of(req).opts.entry_timeout;
  fuse_reply_entry(req, &e);  // (not counted: the directory is no object of the tree)
  return true;
}

bool reserved(fuse_req_t req, uint64_t parent, const char *name) {
  if (parent != 1 || std::strcmp(name, Views::kDirName) != 0) return false;
  fuse_reply_err(req, EPERM);
  return true;
}

// The lookup with which the daemon's own thread revokes a kernel inode of an ended view
// (Invalidator::revoke): the same nodeid with another generation, link count 0. Anyone
// else, or a nodeid not being revoked: no such name.
void lookup_revoke(fuse_req_t req, uint64_t n) {
  Fs &fs = fs_of(req);
  fuse_entry_param e{};
  uint32_t generation = 0;
  InodePtr i = fs.inodes.get(Views::object_of(n));
  std::string task = "/proc/self/task/" + std::to_string(fuse_req_ctx(req)->pid);
  if (!i || ::access(task.c_str(), F_OK) != 0 || !fs.views.revoking(n, &generation))
    return (void)fuse_reply_entry(req, &e);
  e.ino = n;
  e.generation = generation ^ 1;
  e.attr.st_ino = i->ino;
  e.attr.st_mode = S_IFREG;
  fs.inodes.add_lookup_existing(i);
  fs.views.looked_up(Views::slot_of(n));
  fuse_reply_entry(req, &e);
}

void lookup(fuse_req_t req, const char *name) {
  Fs &fs = fs_of(req);
  if (uint64_t n = Invalidator::revoke_nodeid(name)) return lookup_revoke(req, n);
  uint64_t id = 0;
  const char *end = name + std::strlen(name);
  auto [p, ec] = std::from_chars(name, end, id);
  int err = ENOENT;
  TxnPtr t;
  if (ec == std::errc() && p == end && id) t = fs.txns->get(fuse_req_ctx(req)->uid, id, &err);
  if (err == EPERM) return (void)fuse_reply_err(req, EACCES);  // another user's
  if (!t || t->state.load() != TXNFS_ACTIVE) {
    fuse_entry_param e{};  // no lifetime: the name may be a transaction's any moment
    return (void)fuse_reply_entry(req, &e);
  }
  uint32_t slot = fs.views.attach(t);
  if (!slot) return (void)fuse_reply_err(req, ENFILE);
  fuse_entry_param e{};
  if (::fstat(fs.tree_fd, &e.attr) != 0) return (void)fuse_reply_err(req, errno);
  e.attr.st_ino = fs.root->ino;
  e.ino = 1;
  e.generation = fs.root->generation;
  e.attr_timeout = 0;   // the root's attributes are read committed (docs/isolation.md)
  e.entry_timeout = 0;  // every walk through it checks who walks
  fs.inodes.add_lookup_existing(fs.root);
  Views::Scope scope(slot);
  fs.views.to_kernel(e);
  fuse_reply_entry(req, &e);
}

void getattr(fuse_req_t req) {
  struct stat st = dir_stat();
  fuse_reply_attr(req, &st, fs_of(req).opts.attr_timeout);
}

void access(fuse_req_t req, int mask) { fuse_reply_err(req, (mask & W_OK) ? EACCES : 0); }

}  // namespace txnfs::views_dir
