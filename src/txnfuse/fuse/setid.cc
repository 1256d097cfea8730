// Clearing of set-user-ID and set-group-ID bits, as XFS clears them for the caller.
//
// The daemon works on the store as root with CAP_FSETID, so XFS keeps every bit it
// changes for it; with HANDLE_KILLPRIV_V2 (and POSIX_ACL) the kernel leaves the
// clearing to the daemon. The rules (fs/attr.c, fs/posix_acl.c, fs/open.c):
//   - data change (write, truncation, fallocate, copy into): setattr_should_drop_suidgid
//     -- a regular file's S_ISUID, and its S_ISGID where it means "setgid" (group
//     execute set) or the caller is outside the file's group; nothing when the caller
//     has CAP_FSETID;
//   - chown, also one changing no id (chown_common): S_ISUID of anything but a
//     directory, whoever the caller; S_ISGID by setattr_should_drop_sgid (group
//     execute set, or the caller outside the file's old group and without CAP_FSETID);
//   - access ACL set (posix_acl_update_mode): S_ISGID when the caller is outside the
//     file's group and without CAP_FSETID.
// (chmod needs nothing here: the kernel strips S_ISGID from the mode it sends,
// setattr_prepare.) File capabilities (security.capability) need nothing either: XFS
// removes them when the daemon writes, truncates, allocates or chowns, whoever asks.
//
// Whether the caller has CAP_FSETID is read from /proc, and only when the object has a
// bit the change could clear: the kernel says so only on some requests (the kill flags
// of WRITE, OPEN with O_TRUNC and a truncating SETATTR), and not on all paths alike
// (FALLOCATE and COPY_FILE_RANGE carry no flag; how a direct-I/O WRITE sets it has
// varied between kernels). A flag that is set is believed: the kernel checked.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <vector>

#include "store/backing.h"
#include "txnfuse/fuse/fs.h"
#include "txnfuse/txn/proc.h"

namespace txnfs {

namespace {

// Is the caller of `req` in group `gid` (primary or supplementary)?
bool in_group(fuse_req_t req, gid_t gid) {
  if (fuse_req_ctx(req)->gid == gid) return true;
  std::vector<gid_t> groups(64);
  int n = fuse_req_getgroups(req, int(groups.size()), groups.data());
  if (n > int(groups.size())) {
    groups.resize(size_t(n));
    n = fuse_req_getgroups(req, n, groups.data());
  }
  for (int k = 0; k >= 0 && k < std::min(n, int(groups.size())); k++)
    if (groups[size_t(k)] == gid) return true;
  return false;
}

// Whether the caller of `req` has CAP_FSETID: read from /proc (proc.h). When /proc
// cannot tell (no caller: pid 0, or it is gone), root counts as having it.
bool caller_has_fsetid(fuse_req_t req) {
  const fuse_ctx *ctx = fuse_req_ctx(req);
  std::optional<bool> has = ctx->pid > 0 ? has_capability(ctx->pid, kCapFsetid) : std::nullopt;
  return has ? *has : ctx->uid == 0;
}

}  // namespace

mode_t setid_bits_to_clear(fuse_req_t req, const struct stat &st, SetidChange why,
                           bool kernel_kill) {
  mode_t mode = st.st_mode;
  bool suid = mode & S_ISUID, sgid = mode & S_ISGID;
  if (!suid && !sgid) return 0;  // the common case: no /proc reads at all
  switch (why) {
    case SetidChange::kData: {
      if (!S_ISREG(mode)) return 0;
      mode_t bits = suid ? S_ISUID : 0;
      if (sgid && ((mode & S_IXGRP) || !in_group(req, st.st_gid))) bits |= S_ISGID;
      if (!bits) return 0;
      return kernel_kill || !caller_has_fsetid(req) ? bits : 0;
    }
    case SetidChange::kChown: {
      if (S_ISDIR(mode)) return 0;
      mode_t bits = suid ? S_ISUID : 0;
      if (sgid && ((mode & S_IXGRP) || (!in_group(req, st.st_gid) && !caller_has_fsetid(req))))
        bits |= S_ISGID;
      return bits;
    }
    case SetidChange::kAcl:
      return sgid && !in_group(req, st.st_gid) && !caller_has_fsetid(req) ? S_ISGID : 0;
  }
  return 0;
}

int may_clear_by_empty_setattr(fuse_req_t req, const struct stat &st, mode_t clear) {
  const fuse_ctx *ctx = fuse_req_ctx(req);
  if (!clear || ctx->uid == st.st_uid) return 0;
  std::optional<bool> fowner = ctx->pid > 0 ? has_capability(ctx->pid, kCapFowner) : std::nullopt;
  if (fowner ? *fowner : ctx->uid == 0) return 0;
  // Not the owner: a chown is refused, a write's clearing is not. A writer has the file
  // open for writing; a caller that has it open so and calls chown(f, -1, -1) is taken
  // for a writer (docs/isolation.md, set-ID bits).
  std::optional<bool> writing =
      ctx->pid > 0 ? has_open_for_writing(ctx->pid, st.st_ino) : std::nullopt;
  return writing.value_or(false) ? 0 : EPERM;
}

int clear_setid_bits(int fd, mode_t bits, bool *changed) {
  struct stat st;
  if (!bits) return 0;
  if (::fstat(fd, &st) != 0) return errno;
  mode_t mode = st.st_mode & 07777;
  if (!(mode & bits)) return 0;  // (XFS cleared them already, e.g. in a chown)
  mode &= ~bits;
  int rc = ::fchmod(fd, mode);
  if (rc != 0 && errno == EBADF) rc = ::chmod(proc_path(fd).c_str(), mode);  // O_PATH fd
  if (rc != 0) return errno;
  if (changed) *changed = true;
  return 0;
}

int kill_privs(fuse_req_t req, uint64_t nodeid, int fd, SetidChange why, bool kernel_kill) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return errno;
  bool changed = false;
  int err = clear_setid_bits(fd, setid_bits_to_clear(req, st, why, kernel_kill), &changed);
  // The reply carries no attributes, and the kernel invalidates after it only what it
  // expects to change (size and times): its cached mode, which decides what exec does,
  // would keep the cleared bits. Attributes only (offset -1): the kernel takes no lock
  // of the inode for that (see Invalidator::inode_now), so this may run while the
  // request holds the inode's lock.
  if (changed) fs_of(req).inval.inode_now(Views::kernel_nodeid(nodeid));
  return err;
}

}  // namespace txnfs
