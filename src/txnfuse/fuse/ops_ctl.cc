// The control channel: transaction ioctls on any directory or file of the mount.
// The caller's thread id, uid and pid come with the request (fuse_req_ctx).
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "txnfuse/fuse/fs.h"
#include "txnfs/ioctl_abi.h"
#include "txnfuse/txn/txn.h"

namespace txnfs {

namespace {

void op_ioctl(fuse_req_t req, fuse_ino_t, unsigned int cmd, void *, fuse_file_info *,
              unsigned flags, const void *in_buf, size_t in_bufsz, size_t out_bufsz) {
  if (flags & FUSE_IOCTL_COMPAT) return (void)fuse_reply_err(req, ENOSYS);
  Fs &fs = fs_of(req);
  TxnManager &tm = *fs.txns;
  const fuse_ctx *ctx = fuse_req_ctx(req);
  auto in = [&](auto &v) {
    if (in_bufsz < sizeof v) return false;
    std::memcpy(&v, in_buf, sizeof v);
    return true;
  };
  switch (cmd) {
    case TXNFS_IOC_BEGIN: {
      txnfs_ioc_begin b;
      if (!in(b) || out_bufsz < sizeof b) return (void)fuse_reply_err(req, EINVAL);
      int err = tm.begin(ctx->uid, ctx->pid, b.flags, b.pid, &b.id);
      if (err) return (void)fuse_reply_err(req, err);
      return (void)fuse_reply_ioctl(req, 0, &b, sizeof b);
    }
    case TXNFS_IOC_COMMIT:
    case TXNFS_IOC_ABORT: {
      txnfs_ioc_id id;
      if (!in(id)) return (void)fuse_reply_err(req, EINVAL);
      int err = cmd == TXNFS_IOC_COMMIT ? tm.commit(ctx->uid, id.id) : tm.abort(ctx->uid, id.id);
      if (err) return (void)fuse_reply_err(req, err);
      return (void)fuse_reply_ioctl(req, 0, nullptr, 0);
    }
    case TXNFS_IOC_COMMIT2: {
      txnfs_ioc_commit c;
      if (!in(c) || c.reserved != 0 || (c.flags & ~unsigned(TXNFS_COMMIT_LAZY)))
        return (void)fuse_reply_err(req, EINVAL);
      int err = tm.commit(ctx->uid, c.id, c.flags);
      if (err) return (void)fuse_reply_err(req, err);
      return (void)fuse_reply_ioctl(req, 0, nullptr, 0);
    }
    case TXNFS_IOC_SYNC: {
      int err = tm.sync();
      if (err) return (void)fuse_reply_err(req, err);
      return (void)fuse_reply_ioctl(req, 0, nullptr, 0);
    }
    case TXNFS_IOC_INFO: {
      struct txnfs_info i;
      if (!in(i) || out_bufsz < sizeof i) return (void)fuse_reply_err(req, EINVAL);
      int err = tm.info(ctx->uid, i.id, &i);
      if (err) return (void)fuse_reply_err(req, err);
      return (void)fuse_reply_ioctl(req, 0, &i, sizeof i);
    }
    case TXNFS_IOC_LOCK_TIMEOUT: {
      txnfs_ioc_lock_timeout t;
      if (!in(t) || t.reserved != 0) return (void)fuse_reply_err(req, EINVAL);
      int err = tm.set_lock_timeout(ctx->uid, t.id, t.ms);
      if (err) return (void)fuse_reply_err(req, err);
      return (void)fuse_reply_ioctl(req, 0, nullptr, 0);
    }
    case TXNFS_IOC_STATUS: {
      if (out_bufsz < sizeof(txnfs_ioc_status)) return (void)fuse_reply_err(req, EINVAL);
      auto st = std::make_unique<txnfs_ioc_status>();
      std::string json = tm.status_json();
      st->truncated = json.size() >= sizeof st->json;
      st->len = uint32_t(std::min(json.size(), sizeof st->json - 1));
      std::memcpy(st->json, json.data(), st->len);
      st->json[st->len] = 0;
      return (void)fuse_reply_ioctl(req, 0, st.get(), sizeof *st);
    }
    default:
      return (void)fuse_reply_err(req, ENOTTY);
  }
}

}  // namespace

void add_ctl_ops(fuse_lowlevel_ops &ops) { ops.ioctl = op_ioctl; }

}  // namespace txnfs
