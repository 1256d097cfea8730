// The operation table and connection setup.
#include <sys/stat.h>

#include <cerrno>

#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include <spdlog/spdlog.h>

#include "store/error.h"
#include "txnfuse/fuse/fs.h"
#include "txnfuse/fuse/park.h"
#include "txnfuse/fuse/views.h"
#include "sync/stall_watchdog.h"

namespace txnfs {

void add_entry_ops(fuse_lowlevel_ops &ops);
void add_data_ops(fuse_lowlevel_ops &ops);
void add_dir_ops(fuse_lowlevel_ops &ops);
void add_ctl_ops(fuse_lowlevel_ops &ops);

namespace {

void op_init(void *userdata, fuse_conn_info *conn) {
  Fs &fs = *static_cast<Fs *>(userdata);
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
  // Files a transaction makes are read and written by the kernel itself, through its
  // view (views.h): no READ or WRITE of theirs reaches the daemon. Backing files live
  // on XFS, which stacks on nothing: depth 1.
  // (A backing file needs CAP_SYS_ADMIN: a daemon of a user mount goes without.)
  if (fs.want_passthrough && ::geteuid() == 0 && fuse_set_feature_flag(conn, FUSE_CAP_PASSTHROUGH)) {
    conn->max_backing_stack_depth = 1;
    fs.views.enable_passthrough(fs.dev_fd);
  }
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
  if (!fs.want_io_uring) {
    fuse_unset_feature_flag(conn, FUSE_CAP_OVER_IO_URING);
  } else if (!fuse_set_feature_flag(conn, FUSE_CAP_OVER_IO_URING)) {
    spdlog::warn(
        "FUSE over io_uring is not offered by the kernel (is "
        "/sys/module/fuse/parameters/enable_uring Y?); serving /dev/fuse");
  }
  spdlog::info("FUSE protocol {}.{}, passthrough for transactions' new files {}",
               conn->proto_major, conn->proto_minor, fs.views.passthrough_on() ? "on" : "off");
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

template <auto Field, int NodeIndex, int Node2Index, typename... A>
void serve(const char *name, std::shared_ptr<void> buffer, A... a);

// One call of handler `Field` with arguments `a` (the first is the request).
template <auto Field, int NodeIndex, int Node2Index, typename... A>
class CallSite : public park::Site {
 public:
  CallSite(const char *name, std::shared_ptr<void> buffer, A... a)
      : name_(name), buffer_(std::move(buffer)), args_(a...) {}
  std::function<void()> capture() override {
    if (!buffer_) buffer_ = park::take_loop_buffer();
    auto kept = std::apply([](A... x) { return std::make_tuple(Keep<A>(x)...); }, args_);
    return [name = name_, buffer = buffer_, kept]() mutable {
      std::apply([&](auto &...k) { serve<Field, NodeIndex, Node2Index, A...>(name, buffer, k.get()...); },
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

// Is handler field F the field G? (Fields of different types never are.)
template <auto F, auto G>
constexpr bool is_field() {
  if constexpr (std::is_same_v<decltype(F), decltype(G)>) return F == G;
  else return false;
}
template <auto F, auto G>
constexpr bool is = is_field<F, G>();

// The handler's arguments with the view slot stripped from the nodeids at NodeIndex and
// Node2Index (views.h): handlers see object nodeids.
template <int N1, int N2, typename T, size_t I>
T strip(T v) {
  if constexpr (int(I) == N1 || int(I) == N2) return T(Views::object_of(uint64_t(v)));
  else return v;
}
template <int N1, int N2, typename... A, size_t... I>
std::tuple<A...> stripped(std::index_sequence<I...>, A... a) {
  return std::tuple<A...>(strip<N1, N2, A, I>(a)...);
}

// Requests on MNT/.txnfs itself (views_dir.cc); anything that would change it: EACCES.
template <auto Field, typename... A>
void serve_views_dir(A... a) {
  auto t = std::forward_as_tuple(a...);
  fuse_req_t req = std::get<0>(t);
  if constexpr (is<Field, &fuse_lowlevel_ops::lookup>) views_dir::lookup(req, std::get<2>(t));
  else if constexpr (is<Field, &fuse_lowlevel_ops::getattr>) views_dir::getattr(req);
  else if constexpr (is<Field, &fuse_lowlevel_ops::access>) views_dir::access(req, std::get<2>(t));
  else if constexpr (is<Field, &fuse_lowlevel_ops::opendir>) fuse_reply_open(req, std::get<2>(t));
  else if constexpr (is<Field, &fuse_lowlevel_ops::readdir> || is<Field, &fuse_lowlevel_ops::readdirplus>)
    fuse_reply_buf(req, nullptr, 0);
  else if constexpr (is<Field, &fuse_lowlevel_ops::releasedir> || is<Field, &fuse_lowlevel_ops::flush>)
    fuse_reply_err(req, 0);
  else if constexpr (is<Field, &fuse_lowlevel_ops::forget>) fuse_reply_none(req);
  else if constexpr (is<Field, &fuse_lowlevel_ops::getxattr>) fuse_reply_err(req, ENODATA);
  else if constexpr (is<Field, &fuse_lowlevel_ops::listxattr>) {
    if (std::get<2>(t) == 0) fuse_reply_xattr(req, 0);
    else fuse_reply_buf(req, nullptr, 0);
  } else if constexpr (is<Field, &fuse_lowlevel_ops::statfs>) (handlers.statfs)(req, 1);
  else fuse_reply_err(req, EACCES);
}

// The name a request would make, remove or replace in its parent: ".txnfs" in the
// tree's root is reserved (views_dir::reserved). Nothing for other requests.
template <auto Field, typename... A>
bool reserved_name(A... a) {
  auto t = std::forward_as_tuple(a...);
  fuse_req_t req = std::get<0>(t);
  if constexpr (is<Field, &fuse_lowlevel_ops::mknod> || is<Field, &fuse_lowlevel_ops::mkdir> ||
                is<Field, &fuse_lowlevel_ops::unlink> || is<Field, &fuse_lowlevel_ops::rmdir> ||
                is<Field, &fuse_lowlevel_ops::create>)
    return views_dir::reserved(req, std::get<1>(t), std::get<2>(t));
  else if constexpr (is<Field, &fuse_lowlevel_ops::symlink> || is<Field, &fuse_lowlevel_ops::link>)
    return views_dir::reserved(req, std::get<2>(t), std::get<3>(t));
  else if constexpr (is<Field, &fuse_lowlevel_ops::rename>)
    return views_dir::reserved(req, std::get<1>(t), std::get<2>(t)) ||
           views_dir::reserved(req, std::get<3>(t), std::get<4>(t));
  else return false;
}

// Which view a request comes through, and what it then is (views.h): on MNT/.txnfs,
// a request of the views directory; else the handler's, with object nodeids, run under
// the request's slot. Two nodeids of different views (a rename or link between a view
// and the plain tree): EXDEV, as between two mounts.
template <auto Field, int NodeIndex, int Node2Index, typename... A>
void route(A... a) {
  fuse_req_t req = std::get<0>(std::forward_as_tuple(a...));
  if constexpr (is<Field, &fuse_lowlevel_ops::forget_multi>) {
    auto [r, count, forgets] = std::forward_as_tuple(a...);
    Views &views = fs_of(req).views;
    size_t kept = 0;
    for (size_t k = 0; k < count; k++) {
      uint32_t slot = Views::slot_of(forgets[k].ino);
      if (slot == Views::kDirSlot) continue;  // the views directory is no object
      views.forgot(slot, forgets[k].nlookup);
      forgets[kept] = forgets[k];
      forgets[kept++].ino = Views::object_of(forgets[k].ino);
    }
    return (handlers.*Field)(r, kept, forgets);
  } else {
    uint32_t slot = NodeIndex < 0 ? 0 : Views::slot_of(node_arg<NodeIndex>(a...));
    if constexpr (Node2Index >= 0) {
      if (Views::slot_of(node_arg<Node2Index>(a...)) != slot)
        return (void)fuse_reply_err(req, EXDEV);
    }
    if (slot == Views::kDirSlot) return serve_views_dir<Field>(a...);
    auto args = stripped<NodeIndex, Node2Index>(std::index_sequence_for<A...>{}, a...);
    if constexpr (is<Field, &fuse_lowlevel_ops::forget>)
      fs_of(req).views.forgot(slot, std::get<2>(args));
    if constexpr (is<Field, &fuse_lowlevel_ops::lookup>) {
      if (std::get<1>(args) == 1 && views_dir::lookup_in_root(req, slot, std::get<2>(args)))
        return;
    }
    if (std::apply([](auto... x) { return reserved_name<Field>(x...); }, args)) return;
    Views::Scope scope(slot);
    std::apply([](auto... x) { (handlers.*Field)(x...); }, args);
  }
}

// Runs a handler, watched by the stall watchdog; a handler that parked its request
// unwinds to here and the request is answered later (park.h). This is the one place
// where an exception on the request path stops: a handler answers last, so one that
// threw has not answered yet.
template <auto Field, int NodeIndex, int Node2Index, typename... A>
void serve(const char *name, std::shared_ptr<void> buffer, A... a) {
  uint64_t node = node_arg<NodeIndex>(a...);
  stall::InFlight in_flight(name, node);
  CallSite<Field, NodeIndex, Node2Index, A...> site(name, std::move(buffer), a...);
  park::Scope scope(&site);
  try {
    route<Field, NodeIndex, Node2Index>(a...);
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
#define TXNFS_WATCHED2(field, name, node_index, node2_index)                          \
  if (ops.field)                                                                      \
    ops.field = [](auto... a) {                                                       \
      serve<&fuse_lowlevel_ops::field, node_index, node2_index>(name, nullptr, a...); \
    };
#define TXNFS_WATCHED(field, name, node_index) TXNFS_WATCHED2(field, name, node_index, -1)
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
  TXNFS_WATCHED2(rename, "RENAME", 1, 3)
  TXNFS_WATCHED2(link, "LINK", 1, 2)
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
  TXNFS_WATCHED2(copy_file_range, "COPY_FILE_RANGE", 1, 4)
  TXNFS_WATCHED(lseek, "LSEEK", 1)
#undef TXNFS_WATCHED
#undef TXNFS_WATCHED2
  return ops;
}

}  // namespace txnfs
