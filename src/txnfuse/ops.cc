// The operation table and connection setup.
#include <sys/stat.h>

#include "fs.h"

namespace txnfs {

void add_entry_ops(fuse_lowlevel_ops &ops);
void add_data_ops(fuse_lowlevel_ops &ops);
void add_dir_ops(fuse_lowlevel_ops &ops);
void add_ctl_ops(fuse_lowlevel_ops &ops);

namespace {

void op_init(void *, fuse_conn_info *conn) {
  auto want = [conn](unsigned cap) {
    if (conn->capable & cap) conn->want |= cap;
  };
  // Handles that survive restarts: the kernel may LOOKUP(nodeid, "." / "..").
  want(FUSE_CAP_EXPORT_SUPPORT);
  want(FUSE_CAP_SPLICE_WRITE);
  want(FUSE_CAP_SPLICE_MOVE);
  want(FUSE_CAP_PARALLEL_DIROPS);
  want(FUSE_CAP_READDIRPLUS);
  want(FUSE_CAP_READDIRPLUS_AUTO);
  want(FUSE_CAP_CACHE_SYMLINKS);
  // Write-through: every write is a request of the writing thread (transactions bind
  // requests to threads), and set-ID bits are cleared by the kernel, not by us.
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV;
}

}  // namespace

fuse_lowlevel_ops make_ops() {
  fuse_lowlevel_ops ops{};
  ops.init = op_init;
  add_entry_ops(ops);
  add_data_ops(ops);
  add_dir_ops(ops);
  add_ctl_ops(ops);
  return ops;
}

}  // namespace txnfs
