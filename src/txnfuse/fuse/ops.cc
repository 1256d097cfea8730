// The operation table and connection setup.
#include <sys/stat.h>

#include <cerrno>

#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <tuple>

#include <spdlog/spdlog.h>

#include "store/error.h"
#include "txnfuse/fuse/fs.h"
#include "txnfuse/fuse/park.h"
#include "sync/stall_watchdog.h"

namespace txnfs {

void add_entry_ops(fuse_lowlevel_ops &ops);
void add_data_ops(fuse_lowlevel_ops &ops);
void add_dir_ops(fuse_lowlevel_ops &ops);
void add_ctl_ops(fuse_lowlevel_ops &ops);

namespace {

void op_init(void *userdata, fuse_conn_info *conn) {
  // fuse_set_feature_flag() takes a capability only if the kernel offers it.
  auto want = [conn](uint64_t cap) { fuse_set_feature_flag(conn, cap); };
  // Handles that survive restarts: the kernel may LOOKUP(nodeid, "." / "..").
  want(FUSE_CAP_EXPORT_SUPPORT);
  want(FUSE_CAP_SPLICE_WRITE);
  want(FUSE_CAP_SPLICE_MOVE);
  want(FUSE_CAP_PARALLEL_DIROPS);
  want(FUSE_CAP_READDIRPLUS);
  want(FUSE_CAP_READDIRPLUS_AUTO);
  want(FUSE_CAP_CACHE_SYMLINKS);
  // Set-ID bits are cleared here, as XFS clears them for the caller (setid.cc): after
  // writes, truncations, fallocate, copies, chowns and ACL sets; capabilities are removed
  // by XFS itself when the daemon writes. Saves the kernel's GETXATTR
  // security.capability before every write.
  want(FUSE_CAP_HANDLE_KILLPRIV_V2);
  // POSIX ACLs checked by the kernel (default_permissions), applied here: with DONT_MASK
  // the mode of a new object arrives without the umask, which is applied only when the
  // parent has no default ACL -- what XFS does (creation_mode in ops_entry.cc).
  if (fuse_set_feature_flag(conn, FUSE_CAP_POSIX_ACL)) want(FUSE_CAP_DONT_MASK);
  // mmap of files opened without the page cache (every open inside a transaction): a
  // shared mapping's dirty pages come back as WRITEs that name no caller, which belong
  // to the transaction that opened the file (txn/txn_writers.cc).
  want(FUSE_CAP_DIRECT_IO_ALLOW_MMAP);
  // Not asked for: NO_OPENDIR_SUPPORT (OPENDIR decides per open whether the kernel may
  // cache the listing -- only while no transaction is open -- and holds the stream a
  // listing continues from).
  // Write-through: every write is a request of the writing thread (transactions bind
  // requests to threads). With write-back caching the kernel would also trust its own
  // file sizes over every reply: a transaction's size would show to others and an
  // abort's would never come back (measured; docs/performance.md).
  fuse_unset_feature_flag(conn, FUSE_CAP_WRITEBACK_CACHE);
  // A file's pages stay cached across opens and attribute refreshes (no AUTO_INVAL_DATA,
  // which drops them whenever the mtime moved, also after the kernel's own writes): every
  // change of file data the kernel did not make itself is dropped exactly -- a
  // transaction's by the inode invalidation at its end, a direct-I/O write's by the
  // kernel for the range it wrote (docs/isolation.md, "Transactions and the kernel's
  // caches").
  fuse_unset_feature_flag(conn, FUSE_CAP_AUTO_INVAL_DATA);
  fuse_unset_feature_flag(conn, FUSE_CAP_HANDLE_KILLPRIV);
  // Receiving requests by splice makes libfuse 3.18 build a new pipe per request here
  // (fs.pipe-max-size 1 MiB < its buffer + header); reading into memory is cheaper.
  fuse_unset_feature_flag(conn, FUSE_CAP_SPLICE_READ);
  // FUSE over io_uring runs handlers inline on a per-CPU ring thread, which is fine
  // because no handler waits for a lock (park.h). libfuse starts the ring only when the
  // session was made with -o io_uring, and wants it by default when the kernel offers
  // it (/sys/module/fuse/parameters/enable_uring).
  Fs &fs = *static_cast<Fs *>(userdata);
  if (!fs.want_io_uring) {
    fuse_unset_feature_flag(conn, FUSE_CAP_OVER_IO_URING);
  } else if (!fuse_set_feature_flag(conn, FUSE_CAP_OVER_IO_URING)) {
    spdlog::warn(
        "FUSE over io_uring is not offered by the kernel (is "
        "/sys/module/fuse/parameters/enable_uring Y?); serving /dev/fuse");
  }
  spdlog::info("FUSE protocol {}.{}", conn->proto_major, conn->proto_minor);
}

// The handlers make_ops() wraps: every request runs inside a stall::InFlight scope,
// so the watchdog sees it (stall_watchdog.h), and may be parked and run again (park.h).
fuse_lowlevel_ops handlers;

// The nodeid a request is about: its argument at `Index` (-1: none).
template <int Index, typename... A>
uint64_t node_arg(A... a) {
  if constexpr (Index < 0) return 0;
  else return uint64_t(std::get<Index>(std::forward_as_tuple(a...)));
}

// What a parked request keeps of one handler argument. Values are copied; pointers
// into the request buffer (names, data, ioctl input) stay valid while the request is
// parked (park.h); structures libfuse builds on its stack for the call are copied.
template <typename T>
struct Keep {
  T v;
  explicit Keep(T x) : v(x) {}
  T get() const { return v; }
};
template <typename T>
struct KeepCopy {
  std::optional<T> v;
  explicit KeepCopy(T *p) {
    if (p) v = *p;
  }
  T *get() { return v ? &*v : nullptr; }
};
template <>
struct Keep<fuse_file_info *> : KeepCopy<fuse_file_info> {
  using KeepCopy::KeepCopy;
};
template <>
struct Keep<struct stat *> : KeepCopy<struct stat> {
  using KeepCopy::KeepCopy;
};
template <>
struct Keep<fuse_bufvec *> : KeepCopy<fuse_bufvec> {
  using KeepCopy::KeepCopy;
};

template <auto Field, int NodeIndex, typename... A>
void serve(const char *name, std::shared_ptr<void> buffer, A... a);

// One call of handler `Field` with arguments `a` (the first is the request).
template <auto Field, int NodeIndex, typename... A>
class CallSite : public park::Site {
 public:
  CallSite(const char *name, std::shared_ptr<void> buffer, A... a)
      : name_(name), buffer_(std::move(buffer)), args_(a...) {}
  std::function<void()> capture() override {
    if (!buffer_) buffer_ = park::take_loop_buffer();
    auto kept = std::apply([](A... x) { return std::make_tuple(Keep<A>(x)...); }, args_);
    return [name = name_, buffer = buffer_, kept]() mutable {
      std::apply([&](auto &...k) { serve<Field, NodeIndex, A...>(name, buffer, k.get()...); },
                 kept);
    };
  }

 private:
  const char *name_;
  std::shared_ptr<void> buffer_;  // the request buffer, once a parked request owns it
  std::tuple<A...> args_;
};

// Answers a request whose handler threw `e` (src/store/error.h, "Errors on the request
// path"): the exception's errno, EIO if it has none; FORGETs get no answer.
void answer_thrown(const char *name, uint64_t node, fuse_req_t req, const std::exception &e) {
  int err = errno_in(e);
  spdlog::error("{} (node {}): {}", name, node, e.what());
  std::string_view n = name;
  if (n == "FORGET" || n == "BATCH_FORGET") fuse_reply_none(req);
  else fuse_reply_err(req, err > 0 ? err : EIO);
}

// Runs a handler, watched by the stall watchdog; a handler that parked its request
// unwinds to here and the request is answered later (park.h). This is the one place
// where an exception on the request path stops: a handler answers last, so one that
// threw has not answered yet.
template <auto Field, int NodeIndex, typename... A>
void serve(const char *name, std::shared_ptr<void> buffer, A... a) {
  uint64_t node = node_arg<NodeIndex>(a...);
  stall::InFlight in_flight(name, node);
  CallSite<Field, NodeIndex, A...> site(name, std::move(buffer), a...);
  park::Scope scope(&site);
  try {
    (handlers.*Field)(a...);
  } catch (const park::Unwind &) {
  } catch (const std::exception &e) {
    answer_thrown(name, node, std::get<0>(std::forward_as_tuple(a...)), e);
  }
}

}  // namespace

fuse_lowlevel_ops make_ops() {
  fuse_lowlevel_ops ops{};
  ops.init = op_init;
  add_entry_ops(ops);
  add_data_ops(ops);
  add_dir_ops(ops);
  add_ctl_ops(ops);
  handlers = ops;
#define TXNFS_WATCHED(field, name, node_index)                           \
  if (ops.field)                                                         \
    ops.field = [](auto... a) {                                          \
      serve<&fuse_lowlevel_ops::field, node_index>(name, nullptr, a...); \
    };
  TXNFS_WATCHED(lookup, "LOOKUP", 1)
  TXNFS_WATCHED(forget, "FORGET", 1)
  TXNFS_WATCHED(getattr, "GETATTR", 1)
  TXNFS_WATCHED(setattr, "SETATTR", 1)
  TXNFS_WATCHED(readlink, "READLINK", 1)
  TXNFS_WATCHED(mknod, "MKNOD", 1)
  TXNFS_WATCHED(mkdir, "MKDIR", 1)
  TXNFS_WATCHED(unlink, "UNLINK", 1)
  TXNFS_WATCHED(rmdir, "RMDIR", 1)
  TXNFS_WATCHED(symlink, "SYMLINK", 2)
  TXNFS_WATCHED(rename, "RENAME", 1)
  TXNFS_WATCHED(link, "LINK", 1)
  TXNFS_WATCHED(open, "OPEN", 1)
  TXNFS_WATCHED(read, "READ", 1)
  TXNFS_WATCHED(write, "WRITE", 1)
  TXNFS_WATCHED(flush, "FLUSH", 1)
  TXNFS_WATCHED(release, "RELEASE", 1)
  TXNFS_WATCHED(fsync, "FSYNC", 1)
  TXNFS_WATCHED(opendir, "OPENDIR", 1)
  TXNFS_WATCHED(readdir, "READDIR", 1)
  TXNFS_WATCHED(releasedir, "RELEASEDIR", 1)
  TXNFS_WATCHED(fsyncdir, "FSYNCDIR", 1)
  TXNFS_WATCHED(statfs, "STATFS", 1)
  TXNFS_WATCHED(setxattr, "SETXATTR", 1)
  TXNFS_WATCHED(getxattr, "GETXATTR", 1)
  TXNFS_WATCHED(listxattr, "LISTXATTR", 1)
  TXNFS_WATCHED(removexattr, "REMOVEXATTR", 1)
  TXNFS_WATCHED(access, "ACCESS", 1)
  TXNFS_WATCHED(create, "CREATE", 1)
  TXNFS_WATCHED(getlk, "GETLK", 1)
  TXNFS_WATCHED(setlk, "SETLK", 1)
  TXNFS_WATCHED(bmap, "BMAP", 1)
  TXNFS_WATCHED(ioctl, "IOCTL", 1)
  TXNFS_WATCHED(poll, "POLL", 1)
  TXNFS_WATCHED(write_buf, "WRITE", 1)
  TXNFS_WATCHED(forget_multi, "BATCH_FORGET", -1)
  TXNFS_WATCHED(flock, "FLOCK", 1)
  TXNFS_WATCHED(fallocate, "FALLOCATE", 1)
  TXNFS_WATCHED(readdirplus, "READDIRPLUS", 1)
  TXNFS_WATCHED(copy_file_range, "COPY_FILE_RANGE", 1)
  TXNFS_WATCHED(lseek, "LSEEK", 1)
#undef TXNFS_WATCHED
  return ops;
}

}  // namespace txnfs
