#include "txnfuse/fuse/daemon.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>

#include "store/backing.h"
#include "store/error.h"
#include "store/handle_journal.h"
#include "recovery/recover.h"
#include "sync/stall_watchdog.h"
#include "txnfuse/fuse/dev_loop.h"
#include "txnfuse/fuse/mount_options.h"
#include "cluster/cluster_conf.h"
#include "txnfuse/txn/resolver.h"
#include "txnfuse/txn/txn.h"

namespace txnfs {

namespace {

// File descriptors kept free of the fd cache: the FUSE device, the store's directories
// and lock, SQLite's database and WAL files, the undo logs of running transactions.
constexpr uint64_t kFdReserve = 64;

// Lock-order violations (src/sync/mutex.h) go to the log and, like stalls, leave a
// file in TXNFS_STALL_DUMP for the test suite to find.
void report_lock_order(const std::string &m) {
  spdlog::critical("{}", m);
  spdlog::default_logger()->flush();
  const char *dir = std::getenv("TXNFS_STALL_DUMP");
  if (!dir || !*dir) return;
  static std::atomic<int> n{0};
  std::ofstream(fmt::format("{}/lock-order-{}-{}.txt", dir, ::getpid(), ++n)) << m << "\n";
}

std::string absolute(const std::string &path) {
  char buf[PATH_MAX];
  if (!::realpath(path.c_str(), buf)) throw_errno(fmt::format("{}", path), errno);
  return buf;
}

// The tree must still be the directory the handle table's root row names.
void check_root(MetaDb &db, const BackingId &tree) {
  auto root = db.handle(FUSE_ROOT_ID);
  if (!root)
    throw Error("the handle table has no root row", "run txnfs fsck STORE to see the damage");
  if (root->ino != tree.ino || root->generation != tree.generation)
    throw Error("the store's tree is not the directory its handle table was made for",
                "was STORE/tree replaced? run txnfs fsck STORE");
}

// Forks; the parent exits 0 once the child writes a byte to the returned fd (it is
// serving), or 1 if the child dies first. The child detaches from the terminal.
int daemonize() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw_errno("pipe", errno);
  pid_t pid = ::fork();
  if (pid < 0) throw_errno("fork", errno);
  if (pid > 0) {
    ::close(p[1]);
    char ok;
    ::_exit(::read(p[0], &ok, 1) == 1 ? 0 : 1);
  }
  ::close(p[0]);
  ::setsid();
  if (::chdir("/") != 0) { /* "/" always exists */
  }
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::close(null);
  }
  return p[1];
}

struct Session {
  fuse_session *se = nullptr;
  bool mounted = false, handlers = false;
  ~Session() {
    if (handlers) fuse_remove_signal_handlers(se);
    if (mounted) fuse_session_unmount(se);
    if (se) fuse_session_destroy(se);
  }
};

}  // namespace

unsigned fuse_threads(const MountOptions &opts) {
  if (opts.threads) return opts.threads;
  return std::max(2u, std::thread::hardware_concurrency());
}

int run_mount(const MountOptions &opts) {
  Fs fs;
  fs.opts = opts.fs;
  fs.undo_sync = opts.undo_sync;
  fs.paths = StorePaths::of(absolute(opts.store));
  std::string mountpoint = absolute(opts.mountpoint);
  MountOptions o = opts;
  if (!o.log_file.empty() && o.log_file[0] != '/')
    o.log_file = std::filesystem::absolute(o.log_file);
  check_store_layout(fs.paths);
  StoreLock lock(fs.paths);
  std::optional<cluster::ClusterConf> cluster;
  if (!opts.cluster_conf.empty()) {
    std::string error;
    cluster = cluster::load_cluster_conf(opts.cluster_conf, &error);
    if (!cluster) throw Error(error, "see docs/cluster.md for the file's keys");
    if (cluster->node.empty())
      throw Error(opts.cluster_conf + ": a node's configuration needs `node = NAME`");
  }
  // The fd cache must leave room under the open-file limit for open files, the undo
  // logs and SQLite, or creating files fails with EMFILE instead of evicting.
  if (rlimit rl; opts.fd_cache && ::getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
                 rl.rlim_max != RLIM_INFINITY && opts.fd_cache + kFdReserve > rl.rlim_max)
    throw Error(fmt::format("fd cache of {} fds does not fit the open-file limit of {} "
                            "(it needs {} more for open files and the database)",
                            opts.fd_cache, rl.rlim_max, kFdReserve),
                "choose a smaller fd_cache, or raise the limit (ulimit -Hn, LimitNOFILE=)");
  fs.fds.set_capacity(opts.fd_cache ? opts.fd_cache : FdCache::default_capacity());

  fs.tree_fd = ::open(fs.paths.tree.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fs.tree_fd < 0) throw_errno("open " + fs.paths.tree, errno);
  BackingId tree = backing_id(fs.tree_fd);
  fs.tree_ino = tree.ino;
  // Validate the database and roll back what a crash left half-done now, while
  // errors still reach the caller; the connection the daemon uses is opened after
  // fork (SQLite connections must not cross fork).
  {
    auto db = MetaDb::open(fs.paths.db);
    if (int v = db->upgraded_from())
      spdlog::info("metadata database upgraded from schema version {} to {}", v, kSchemaVersion);
    check_root(*db, tree);
    fs.reflink = db->get_meta("backups").value_or("reflink") == "reflink";
    RecoveryOptions ro;
    ro.progress = [](const std::string &line) { spdlog::info("{}", line); };
    if (cluster) ro.decide = recovery_decider(*cluster);
    RecoveryReport rep = recover_store(fs.paths, *db, ro);
    for (auto &p : rep.problems) spdlog::error("recovery: not restored: {}", p);
    for (auto &f : rep.handle_fixes) spdlog::info("recovery: handle table: {}", f);
    if (rep.anything()) spdlog::info("recovery: {}", recovery_summary(rep));
    if (auto ids = recovery_ids(rep); !ids.empty()) spdlog::info("recovery: transactions {}", ids);
    fs.recoveries = rep.rolled_back;
    // A rollback (this recovery, an earlier one, or an abort) that could not restore
    // everything marked the store damaged: serving it as if nothing happened would
    // hide that files may hold changes of rolled-back transactions.
    if (auto damage = db->open_damage(); !damage.empty()) {
      std::string all;
      for (auto &d : damage) all += "\n  " + describe_damage(fs.paths, d);
      std::string what = fmt::format(
          "store {} is marked damaged ({} problem{} a rollback could "
          "not fix):{}",
          fs.paths.root, damage.size(), damage.size() == 1 ? "" : "s", all);
      if (!opts.force)
        throw Error(what + "\nnot mounted (recovery has run; the store is otherwise ready)",
                    damage_hint());
      fmt::print(stderr, "txnfs: warning: {}\nserving it anyway (--force)\n", what);
      spdlog::warn("{}; serving it anyway (--force)", what);
    }
  }
  fs.backups_fd = ::open(fs.paths.backups.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fs.backups_fd < 0) throw_errno("open " + fs.paths.backups, errno);
  fs.txns->limits.lock_timeout = opts.lock_timeout;
  fs.txns->limits.max_ops = opts.max_ops;
  fs.txns->limits.max_backup_bytes = opts.max_backup_bytes;
  fs.txns->limits.lazy_flush = opts.lazy_flush;

  // The mount's source is the store's path (what mount(8) hands the helper, and what
  // findmnt, umount STORE and fstab tools compare), unless fsname= names another.
  MountFlags flags = parse_mount_options(opts.fuse_opts, ::geteuid() == 0);
  // -o io_uring (or --io-uring): libfuse starts its ring threads at INIT when the kernel
  // agrees (op_init in ops.cc); the option is passed on only by this flag.
  fs.want_io_uring = opts.io_uring || flags.io_uring;
  fs.want_passthrough = !flags.nopassthrough;
  std::vector<std::string> argv_s = {
      "txnfs", "-o",
      libfuse_options(flags, "default_permissions,allow_other,subtype=txnfs", fs.paths.root)};
  if (fs.want_io_uring) argv_s.insert(argv_s.end(), {"-o", "io_uring"});
  std::vector<char *> argv;
  for (auto &s : argv_s) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(int(argv.size()), argv.data());

  fuse_lowlevel_ops ops = make_ops();
  Session s;
  s.se = fuse_session_new(&args, &ops, sizeof ops, &fs);
  if (!s.se) throw Error("cannot start a FUSE session (bad -o option?)");
  if (fuse_set_signal_handlers(s.se) != 0) throw Error("cannot install signal handlers");
  s.handlers = true;
  if (fuse_session_mount(s.se, mountpoint.c_str()) != 0)
    throw Error(fmt::format("cannot mount at {}", mountpoint),
                "does the directory exist, and is /dev/fuse available?");
  s.mounted = true;
  fs.dev_fd = fuse_session_fd(s.se);
  // What libfuse's mount cannot set (mount_options.h), one remount sets. Before any
  // request is served: nothing waits for the daemon.
  if (unsigned long lacks = flags_libfuse_lacks(flags))
    if (::mount(nullptr, mountpoint.c_str(), nullptr, remount_flags(flags), nullptr) != 0)
      throw Error(errno,
                  fmt::format("cannot set {} on {}",
                              lacks & MS_STRICTATIME ? "strictatime" : "lazytime", mountpoint));

  int ready_fd = -1;
  if (!opts.foreground) {
    ready_fd = daemonize();
    if (o.log_file.empty())
      spdlog::set_default_logger(spdlog::syslog_logger_mt("txnfs", "txnfs", LOG_PID));
  }
  if (!o.log_file.empty()) {
    spdlog::set_default_logger(spdlog::basic_logger_mt("txnfs", o.log_file));
    spdlog::flush_on(spdlog::level::info);
  }
  if (!opts.pid_file.empty()) std::ofstream(opts.pid_file) << ::getpid() << "\n";

  fs.db = MetaDb::open(fs.paths.db);
  // Handle rows of new objects go to SQLite in batches; recovery (above) wrote back
  // what a killed daemon had only journaled.
  fs.db->defer_handles(HandleJournal::open(fs.paths.handle_journal));
  fs.root = std::make_shared<Inode>();
  fs.root->nodeid = FUSE_ROOT_ID;
  fs.root->ino = tree.ino;
  fs.root->generation = uint32_t(tree.generation);
  fs.root->fh = tree.fh;
  fs.root->type = S_IFDIR;
  fs.inodes.add_lookup(fs.root);  // the root never leaves the table
  // MOUNT/.txnfs is the directory of views (views.h): a name the tree's root already
  // has there (a store from before views) is hidden behind it.
  if (struct stat st; ::fstatat(fs.tree_fd, Views::kDirName, &st, AT_SYMLINK_NOFOLLOW) == 0)
    spdlog::warn(
        "{}/{} is hidden: MOUNT/{} is the directory of transactions' views; rename it in "
        "the store's tree while the store is not mounted to reach it",
        fs.paths.tree, Views::kDirName, Views::kDirName);
  ::umask(0);                     // modes arrive with the caller's umask applied
  // Open files take one fd each besides the fd cache: allow as many as the hard limit.
  if (rlimit rl; ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  spdlog::info("serving {} at {}", fs.paths.root, mountpoint);

  lock_order::set_reporter(report_lock_order);
  stall::Watchdog watchdog;
  watchdog.start();
  fs.txns->start();
  if (cluster) {
    fs.resolver = std::make_unique<Resolver>(*cluster, *fs.txns);
    fs.resolver->start();
    spdlog::info("cluster {}: node {}; etcd {}; prepared transactions resolved after {} ms",
                 cluster->cluster, cluster->node, fmt::join(cluster->etcd, ","),
                 cluster->prepared_timeout.count());
  }
  fs.inval.set_mountpoint(mountpoint);
  fs.inval.start(s.se);
  if (ready_fd >= 0) {  // the mount is served: let `txnfs mount` return
    char ok = 0;
    [[maybe_unused]] auto n = ::write(ready_fd, &ok, 1);
    ::close(ready_fd);
  }

  // Resumed requests (park.h) run on these; their number bounds how many handlers
  // unblocked by one commit run at once. Control requests that wait get threads of
  // their own, as many as wait at once.
  fs.resumer.start(2);
  fs.control.start(1, true);
  int rc = serve_dev_fuse(s.se, fuse_threads(opts));
  // Unmounted: requests still parked are answered (the kernel has gone) and release what
  // they hold before the transactions' threads stop.
  if (size_t n = fs.locks.cancel_all(ENODEV)) spdlog::info("unmount: {} parked requests failed", n);
  fs.resumer.stop();
  fs.control.stop();
  fs.inval.stop();
  if (fs.resolver) fs.resolver->stop();
  fs.txns->stop();
  watchdog.stop();
  spdlog::info("unmounting {}", mountpoint);
  if (!opts.pid_file.empty()) ::unlink(opts.pid_file.c_str());
  return rc == 0 ? 0 : 1;
}

}  // namespace txnfs
