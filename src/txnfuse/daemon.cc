#include "daemon.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>

#include "backing.h"
#include "error.h"

namespace txnfs {

namespace {

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

int run_mount(const MountOptions &opts) {
  Fs fs;
  fs.opts = opts.fs;
  fs.paths = StorePaths::of(absolute(opts.store));
  std::string mountpoint = absolute(opts.mountpoint);
  check_store_layout(fs.paths);
  StoreLock lock(fs.paths);

  fs.tree_fd = ::open(fs.paths.tree.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fs.tree_fd < 0) throw_errno("open " + fs.paths.tree, errno);
  BackingId tree = backing_id(fs.tree_fd);
  fs.tree_ino = tree.ino;
  // Validate the database now, while errors still reach the caller; the connection
  // the daemon uses is opened after fork (SQLite connections must not cross fork).
  check_root(*MetaDb::open(fs.paths.db), tree);

  std::vector<std::string> argv_s = {
      "txnfs", "-o",
      fmt::format("default_permissions,allow_other,fsname=txnfs:{},subtype=txnfs",
                  fs.paths.root)};
  for (auto &o : opts.fuse_opts) {
    argv_s.push_back("-o");
    argv_s.push_back(o);
  }
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

  if (!opts.foreground) {
    fuse_daemonize(0);
    spdlog::set_default_logger(spdlog::syslog_logger_mt("txnfs", "txnfs", LOG_PID));
  }
  if (!opts.pid_file.empty()) std::ofstream(opts.pid_file) << ::getpid() << "\n";

  fs.db = MetaDb::open(fs.paths.db);
  fs.root = std::make_shared<Inode>();
  fs.root->fd = ::dup(fs.tree_fd);
  fs.root->nodeid = FUSE_ROOT_ID;
  fs.root->ino = tree.ino;
  fs.root->generation = tree.generation;
  fs.root->type = S_IFDIR;
  fs.inodes.add_lookup(fs.root);  // the root never leaves the table
  ::umask(0);                     // modes arrive with the caller's umask applied
  spdlog::info("serving {} at {}", fs.paths.root, mountpoint);

  fuse_loop_config *cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, 1);
  fuse_loop_cfg_set_max_threads(cfg, 64);
  int rc = fuse_session_loop_mt(s.se, cfg);
  fuse_loop_cfg_destroy(cfg);
  spdlog::info("unmounting {}", mountpoint);
  if (!opts.pid_file.empty()) ::unlink(opts.pid_file.c_str());
  return rc == 0 ? 0 : 1;
}

}  // namespace txnfs
