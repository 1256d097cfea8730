// txnfs — the command-line entry point: one subcommand per user-facing action.
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "txnfuse/cli/cli_cluster.h"
#include "txnfuse/cli/cli_recovery.h"
#include "txnfuse/cli/cli_txn.h"
#include "txnfuse/cli/cli_umount.h"
#include "store/crash_point.h"
#include "store/fault_point.h"
#include "txnfuse/fuse/daemon.h"
#include "store/error.h"
#include "recovery/fsck.h"
#include "store/store.h"

using namespace txnfs;

int main(int argc, char **argv) {
  CLI::App app{"txnfs — a transactional file system (FUSE over XFS with reflink)"};
  app.require_subcommand(1);

  std::string store, mountpoint;
  bool allow_copy = false;
  auto *init = app.add_subcommand("init", "Make a directory on XFS a txnfs store");
  init->add_option("STORE", store, "the store directory (missing or empty)")->required();
  init->add_flag("--allow-copy-backups", allow_copy,
                 "accept a file system without reflink; back data up by copying");

  MountOptions mo;
  auto *mount = app.add_subcommand("mount", "Serve a store's tree at a mount point");
  mount->add_option("STORE", mo.store, "the store directory")->required();
  mount->add_option("MOUNTPOINT", mo.mountpoint, "an existing directory")->required();
  mount->add_flag("-f,--foreground", mo.foreground, "stay in the foreground, log to stderr");
  mount->add_flag("--force", mo.force,
                  "serve a store that is marked damaged (a rollback could not restore "
                  "everything; txnfs fsck lists what), instead of refusing it");
  mount->add_option("-o", mo.fuse_opts, "extra FUSE mount options (comma-separated)");
  mount->add_option("--pid-file", mo.pid_file, "write the daemon's PID to this file");
  mount->add_option("--log-file", mo.log_file,
                    "log to this file (default: stderr with -f, else syslog)");
  mount->add_option("--entry-timeout", mo.fs.entry_timeout, "seconds the kernel may cache names")
      ->capture_default_str();
  mount->add_option("--attr-timeout", mo.fs.attr_timeout, "seconds the kernel may cache attributes")
      ->capture_default_str();

  int64_t lock_timeout_ms = mo.lock_timeout.count();
  mount
      ->add_option("--lock-timeout-ms", lock_timeout_ms,
                   "longest wait for a lock before the request fails (ETIMEDOUT)")
      ->capture_default_str();
  mount->add_flag("--undo-sync", mo.undo_sync,
                  "sync the undo log after every step (slow; for measuring the default)");
  mount->add_option("--max-txn-ops", mo.max_ops, "operations one transaction may perform")
      ->capture_default_str();
  mount
      ->add_option("--max-txn-backup-bytes", mo.max_backup_bytes,
                   "bytes one transaction may back up")
      ->capture_default_str();
  mount
      ->add_option("--fd-cache", mo.fd_cache,
                   "O_PATH fds kept open for files the kernel knows, reopened by handle "
                   "on demand (default: half the open-file hard limit)")
      ->check(CLI::PositiveNumber);

  mount->add_flag("--io-uring", mo.io_uring,
                  "take requests over FUSE's io_uring when the kernel offers it "
                  "(/sys/module/fuse/parameters/enable_uring=Y), else /dev/fuse; "
                  "the same as -o io_uring");
  mount
      ->add_option("--threads", mo.threads,
                   "threads reading /dev/fuse (default: max(2, CPUs)); requests waiting "
                   "for locks occupy none")
      ->check(CLI::Range(1u, 1024u));

  int64_t lazy_flush_ms = mo.lazy_flush.count();
  mount
      ->add_option("--lazy-flush-ms", lazy_flush_ms,
                   "longest time a lazily committed transaction stays not durable (1.." +
                       std::to_string(TxnLimits::kMaxLazyFlush.count()) + ")")
      ->check(CLI::Range(int64_t(1), int64_t(TxnLimits::kMaxLazyFlush.count())))
      ->capture_default_str();

  mount
      ->add_option("--cluster", mo.cluster_conf,
                   "the node's cluster configuration (docs/cluster.md): prepared "
                   "transactions are resolved through etcd, at mount and after their timeout")
      ->check(CLI::ExistingFile);

  bool force_umount = false;
  auto *umount = app.add_subcommand("umount", "Unmount a txnfs mount point");
  umount->add_option("MOUNTPOINT", mountpoint, "the mount point (or the store it serves)")
      ->required();
  umount->add_flag("--force", force_umount,
                   "for a daemon that is dead or does not answer: abort the mount's FUSE "
                   "connection (waiting requests fail with ENOTCONN, the daemon exits) and "
                   "detach the mount point; the next mount rolls back what was open");

  bool repair = false, accept_damage = false;
  auto *fsck = app.add_subcommand("fsck",
                                  "Check that the database, the tree and the recovery "
                                  "state agree");
  fsck->add_option("STORE", store, "the store directory")->required();
  fsck->add_flag("--repair", repair,
                 "run recovery, then make the handle table agree with the tree (deletes rows "
                 "of vanished objects, adds missing rows, corrects names); recreates a missing "
                 "backup area. Refuses a mounted store");
  fsck->add_flag("--accept-damage", accept_damage,
                 "with --repair: clear the store's damage mark (what earlier rollbacks could "
                 "not restore, listed by fsck) after you have checked the files it names; "
                 "deletes the undo logs kept for them in STORE/.txnfs/damaged")
      ->needs("--repair");
  fsck->footer(
      "Exit status: 0 clean, 1 problems found (each printed; a store marked damaged "
      "stays so until --repair --accept-damage), 2 error.");

  bool force = false;
  auto *recover = app.add_subcommand(
      "recover", "Roll back what a crash left half-done (mount does this by itself)");
  recover->add_option("STORE", store, "the store directory (not mounted)")->required();
  recover->add_flag("--force", force,
                    "also roll back undo logs that are damaged, skipping the steps that "
                    "cannot be applied (they are listed)");
  bool verbose = false;
  recover->add_flag("-v,--verbose", verbose, "list every handle-table correction");
  std::string recover_cluster;
  recover
      ->add_option("--cluster", recover_cluster,
                   "the node's cluster configuration: prepared transactions get their "
                   "decision from etcd (without it a store with one is refused)")
      ->check(CLI::ExistingFile);
  recover->footer(
      "Exit status: 0 recovered or nothing to do, 1 error, steps not restored, or "
      "the store is marked damaged (each problem listed; see txnfs fsck).");

  std::string resolve_gid, resolve_cluster;
  bool abort_if_undecided = false;
  auto *resolve = app.add_subcommand(
      "resolve", "End a prepared transaction of a cluster as etcd's decision says");
  resolve->add_option("MOUNTPOINT", mountpoint, "the node's txnfs mount")->required();
  resolve->add_option("GID", resolve_gid, "the global transaction id (txnfs status shows it)")
      ->required();
  resolve->add_option("--cluster", resolve_cluster, "the node's cluster configuration")
      ->required()
      ->check(CLI::ExistingFile);
  resolve->add_flag("--abort-if-undecided", abort_if_undecided,
                    "if etcd has no decision yet, write ABORT by compare-and-swap first "
                    "(presumed abort; a COMMIT written before wins)");
  resolve->footer(
      "Exit status: 0 resolved (or not prepared here any more), 1 error, 3 no decision yet.");

  auto *crash_points = app.add_subcommand("crash-points", "List the crash-injection points");
  crash_points->group("");  // hidden: for test harnesses (TXNFS_CRASH_AT=NAME:COUNT)
  auto *fault_points = app.add_subcommand("fault-points", "List the fault-injection points");
  fault_points->group("");  // hidden: for test harnesses (TXNFS_FAIL_AT=NAME:COUNT:ERRNO)

  cli::TxnCommands txn(app);  // run, begin, commit, abort, status (cli_txn.cc)

  app.failure_message(cli::failure_message);  // "txnfs: error: ..."
  try {
    std::vector<const char *> args = txn.split_run_command(argc, argv);  // for `txnfs run`
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError &e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : txn.usage_exit_status();  // 2 (125 for run)
  }
  try {
    crash::check_environment();
    fault::check_environment();
    if (txn.selected()) return txn.execute();
    if (*init) {
      init_store(store, allow_copy);
      fmt::print("initialised txnfs store {}\n", store);
      return 0;
    }
    if (*mount) {
      mo.lock_timeout = std::chrono::milliseconds(lock_timeout_ms);
      mo.lazy_flush = std::chrono::milliseconds(lazy_flush_ms);
      return run_mount(mo);
    }
    if (*umount) return cli::umount_command(mountpoint, force_umount);
    if (*fsck) return cli::fsck_command(store, repair, accept_damage);
    if (*recover) return cli::recover_command(store, force, verbose, recover_cluster);
    if (*resolve)
      return cli::resolve_command(mountpoint, resolve_gid, resolve_cluster, abort_if_undecided);
    if (*crash_points) return cli::crash_points_command();
    if (*fault_points) return cli::fault_points_command();
  } catch (const Error &e) {
    fmt::print(stderr, "txnfs: error: {}\n", e.what());
    if (!e.hint().empty()) fmt::print(stderr, "  hint: {}\n", e.hint());
    return *fsck ? 2 : 1;
  } catch (const std::exception &e) {
    fmt::print(stderr, "txnfs: error: {}\n", e.what());
    return *fsck ? 2 : 1;
  }
  return 0;
}
