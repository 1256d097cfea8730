// txnfs run / begin / commit / abort / status: what each does (cmd_run, cmd_begin,
// cmd_end, cmd_status) and their command line (TxnCommands). Each returns the exit status
// of exit_status.h; errors are printed through messages.h.
#include "txnfuse/cli/cli_txn.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <exception>

#include <fmt/format.h>

#include "txnfuse/cli/exit_status.h"
#include "txnfuse/cli/messages.h"
#include "txnfuse/cli/spawn.h"
#include "txnfuse/cli/status_table.h"

namespace txnfs::cli {

namespace {

// "cannot access MOUNT: ..." if MOUNT cannot be stat'ed, so that a missing path is not
// mistaken for a missing transaction (both are ENOENT).
bool check_mount_path(const std::string &mount) {
  struct stat st;
  if (::stat(mount.c_str(), &st) == 0) return true;
  int err = errno;
  if (err == ENOTCONN || err == ECONNABORTED)  // (the latter: over FUSE's io_uring)
    print_error(
        fmt::format("cannot access {}: {} (its txnfs daemon is gone)", mount, std::strerror(err)),
        "clean the dead mount up with `txnfs umount --force MOUNTPOINT`, then mount it "
        "again");
  else print_error(fmt::format("cannot access {}: {}", mount, std::strerror(err)));
  return false;
}

// Whether transaction ID is still open; nullopt if that cannot be told.
std::optional<bool> still_open(const std::string &mount, txnfs_id_t id) {
  struct txnfs_info info {};
  int rc = ::txnfs_info(mount.c_str(), id, &info);
  if (rc == 0) return info.state == TXNFS_ACTIVE || info.state == TXNFS_ABORT_ONLY;
  if (rc == -ENOENT) return false;
  return std::nullopt;
}

// A refused commit (not ENOENT/EPERM, the transaction was not ours to end) may leave the
// transaction open and abort-only, or the daemon may have rolled it back already.
bool commit_refusal_may_leave_open(int err) {
  return err != ENOENT && err != EPERM && err != ENOTTY && err != ENOTCONN && err != ECONNABORTED &&
         err != EIO;
}

// ---- txnfs run -------------------------------------------------------------------------

// Aborts ID at the end of `txnfs run`; returns EXIT_STATUS, or 125 if the abort failed.
// ROLLED_BACK_IF_GONE: a commit was refused, so a transaction no longer open was rolled
// back by the daemon.
int run_abort(const std::string &mount, txnfs_id_t id, const std::string &why, int exit_status,
              bool rolled_back_if_gone = false) {
  struct txnfs_info info {};
  std::string count;
  if (::txnfs_info(mount.c_str(), id, &info) == 0)
    count = fmt::format(": {} operation{} rolled back", info.ops, info.ops == 1 ? "" : "s");
  int rc = ::txnfs_abort(mount.c_str(), id);
  if (rc == 0 || (rc == -ENOENT && rolled_back_if_gone)) {
    print_outcome(run_summary_aborted(id, why) + count);
    return exit_status;
  }
  if (rc == -ENOENT) {  // it ended some other way (e.g. the command ended it itself)
    print_warning(fmt::format("transaction {} was no longer open, nothing to abort ({})", id, why));
    return exit_status;
  }
  print_error(txn_error_message(Action::Abort, -rc, mount, id));
  return kRunTxnFailed;
}

int cmd_run(const TxnOptions &o) {
  if (o.command.empty()) {
    print_error("no command given", "txnfs run [--abort] MOUNT [--] COMMAND [ARGS...]");
    return kRunTxnFailed;
  }
  if (!check_mount_path(o.mount)) return kRunTxnFailed;
  txnfs_id_t id = 0;
  int rc = ::txnfs_begin(o.mount.c_str(), TXNFS_BIND_PROCESS, 0, &id);
  if (rc < 0) {
    print_error(txn_error_message(Action::Begin, -rc, o.mount) + "; the command was not run");
    return kRunTxnFailed;
  }

  // The command sees MOUNT through the transaction's view (docs/isolation.md, "Views").
  std::function<int()> enter_view;
  if (!o.no_view) enter_view = [&] { return -::txnfs_enter_view(o.mount.c_str(), id); };
  RunResult r = spawn_and_wait(o.command, enter_view);
  if (r.prepare_errno != 0) {
    print_error(fmt::format("cannot enter the view of transaction {}: {}", id,
                            std::strerror(r.prepare_errno)),
                ::geteuid() != 0 && (r.prepare_errno == EPERM || r.prepare_errno == EINVAL ||
                                     r.prepare_errno == ENOSPC || r.prepare_errno == EUSERS)
                    ? "a user other than root enters it in a user namespace, which may be off "
                      "here (sysctl kernel.unprivileged_userns_clone, "
                      "user.max_user_namespaces); --no-view runs the command bound by "
                      "process id instead"
                    : "");
    return run_abort(o.mount, id, "the command was not run", kRunTxnFailed);
  }
  if (r.sys_errno != 0) {
    print_error(fmt::format("cannot start {}: {}", o.command.front(), std::strerror(r.sys_errno)));
    return run_abort(o.mount, id, "command could not be started", kRunTxnFailed);
  }
  if (r.exec_errno != 0) {
    print_error(fmt::format("cannot run {}: {}", o.command.front(), std::strerror(r.exec_errno)));
    return run_abort(o.mount, id, "command could not be run",
                     r.exec_errno == ENOENT ? kRunNotFound : kRunCannotExec);
  }
  int status = exit_status_of(r.wait_status);
  if (o.abort) return run_abort(o.mount, id, "--abort", status);
  if (status != 0)
    return run_abort(o.mount, id, "command " + describe_wait_status(r.wait_status), status);

  std::optional<uint64_t> ops;
  struct txnfs_info info {};
  if (::txnfs_info(o.mount.c_str(), id, &info) == 0) ops = info.ops;
  rc = ::txnfs_commit2(o.mount.c_str(), id, o.lazy ? TXNFS_COMMIT_LAZY : TXNFS_COMMIT_DURABLE);
  if (rc == 0) {
    print_outcome(run_summary_committed(id, ops) + (o.lazy ? " (lazily)" : ""));
    return 0;
  }
  print_error(txn_error_message(Action::Commit, -rc, o.mount, id));
  if (rc == -EIO) {
    print_outcome(run_summary_aborted(id, "commit failed; the command's effects were rolled back"));
    return kRunTxnFailed;
  }
  if (!commit_refusal_may_leave_open(-rc)) return kRunTxnFailed;
  // Abort-only (a lost deadlock or lock wait, a failed operation): make sure it is rolled
  // back -- by now, or by this abort.
  return run_abort(o.mount, id, "commit refused; the command's effects were rolled back",
                   kRunTxnFailed, true);
}

// ---- begin / commit / abort / status ----------------------------------------------------

int cmd_begin(const TxnOptions &o) {
  pid_t pid = o.pid;
  if (pid == 0) {
    pid = ::getppid();
    if (pid <= 1) {
      print_error("txnfs has no calling process to bind the transaction to",
                  "name the process with --pid PID");
      return 1;
    }
  }
  if (!check_mount_path(o.mount)) return 1;
  txnfs_id_t id = 0;
  int rc = ::txnfs_begin(o.mount.c_str(), TXNFS_BIND_PROCESS, pid, &id);
  if (rc < 0) {
    print_error(txn_error_message(Action::Begin, -rc, o.mount, 0, pid));
    return 1;
  }
  fmt::print("{}\n", id);
  return 0;
}

int cmd_end(const TxnOptions &o, bool commit) {
  std::optional<txnfs_id_t> id = parse_txn_id(o.id);
  if (!id) {
    print_error(
        fmt::format("invalid transaction id '{}' (expected a positive integer, as "
                    "printed by `txnfs begin`)",
                    o.id));
    return 1;
  }
  if (!check_mount_path(o.mount)) return 1;
  int rc = commit ? ::txnfs_commit2(o.mount.c_str(), *id,
                                    o.lazy ? TXNFS_COMMIT_LAZY : TXNFS_COMMIT_DURABLE)
                  : ::txnfs_abort(o.mount.c_str(), *id);
  if (rc == 0) return 0;
  std::string msg = txn_error_message(commit ? Action::Commit : Action::Abort, -rc, o.mount, *id);
  std::string hint;
  if (commit && commit_refusal_may_leave_open(-rc)) {
    std::optional<bool> open = still_open(o.mount, *id);
    if (open == false) msg += "; the transaction was rolled back";
    else if (open == true)
      hint = fmt::format("it can only abort now: txnfs abort {} {}", o.mount, *id);
  }
  print_error(msg, hint);
  return 1;
}

int cmd_sync(const TxnOptions &o) {
  if (!check_mount_path(o.mount)) return 1;
  int rc = ::txnfs_sync(o.mount.c_str());
  if (rc == 0) return 0;
  print_error(txn_error_message(Action::Status, -rc, o.mount));
  return 1;
}

int cmd_status(const TxnOptions &o) {
  if (!check_mount_path(o.mount)) return 1;
  std::string buf(TXNFS_STATUS_JSON_MAX, '\0');
  int rc = ::txnfs_status_json(o.mount.c_str(), buf.data(), buf.size());
  if (rc < 0) {
    print_error(txn_error_message(Action::Status, -rc, o.mount));
    return 1;
  }
  buf.resize(std::strlen(buf.c_str()));
  if (rc == 1)
    print_warning(
        "the daemon shortened the status to fit the control channel; it may be "
        "incomplete");
  if (o.json) {
    fmt::print("{}{}", buf, !buf.empty() && buf.back() == '\n' ? "" : "\n");
    return 0;
  }
  try {
    fmt::print("{}", format_status(buf));
  } catch (const std::exception &e) {
    print_error(fmt::format("unexpected status from the daemon of {}: {}", o.mount, e.what()));
    return 1;
  }
  return 0;
}

}  // namespace

// ---- the command line -------------------------------------------------------------------

std::optional<txnfs_id_t> parse_txn_id(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  for (char c : s)
    if (c < '0' || c > '9') return std::nullopt;
  txnfs_id_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v == 0) return std::nullopt;
  return v;
}

std::string failure_message(const CLI::App *app, const CLI::Error &e) {
  return "txnfs: error: " + CLI::FailureMessage::simple(app, e);
}

TxnCommands::TxnCommands(CLI::App &app) {
  const char *mount_help = "the txnfs mount point (or any file or directory inside it)";

  run_ = app.add_subcommand("run",
                            "Run a command as one transaction: commit if it succeeds, "
                            "abort if it fails");
  run_->add_option("MOUNT", opt_.mount, mount_help)->required();
  run_->add_flag("--abort", opt_.abort,
                 "abort the transaction even if the command succeeds (a dry run)");
  run_->add_flag("--no-view", opt_.no_view,
                 "do not enter the transaction's view: COMMAND's requests belong to the "
                 "transaction by process id alone, through the kernel inodes plain readers "
                 "share (docs/isolation.md, \"Binding by process id\")");
  run_->add_flag("--lazy", opt_.lazy,
                 "commit lazily: final and visible at once, durable within the mount's "
                 "--lazy-flush-ms (a crash before then rolls it back whole)");
  // Only for --help: split_run_command() takes the command out before CLI11 parses.
  run_->add_option("COMMAND", help_only_command_,
                   "the command and its arguments: everything after MOUNT (or after --)");
  run_->footer(
      "Usage: txnfs run [--abort] [--lazy] [--no-view] MOUNT [--] COMMAND [ARGS...]\n"
      "Options of txnfs run go before COMMAND; everything from COMMAND on is passed to it.\n"
      "\n"
      "Begins a transaction bound to txnfs's own process, then runs COMMAND (looked up in\n"
      "PATH) as its child: everything COMMAND and the processes it starts do on MOUNT belongs\n"
      "to the transaction. COMMAND sees MOUNT through the transaction's own view (a private\n"
      "mount namespace with MOUNT/.txnfs/ID bound over MOUNT; for a user other than root,\n"
      "in a user namespace of its own ids: other owners show as nobody, set-ID programs run\n"
      "unprivileged), so no one else sees what it has not committed. If COMMAND exits with\n"
      "status 0 the transaction commits, otherwise (or with --abort) it aborts and every\n"
      "effect on MOUNT is rolled back. SIGINT, SIGTERM and SIGHUP sent to txnfs are\n"
      "forwarded to COMMAND. One line on stderr tells the outcome.\n"
      "\n"
      "Exit status: COMMAND's own, or 128+N if signal N killed it;\n"
      "  125  the transaction could not begin (COMMAND did not run), or the commit failed:\n"
      "       COMMAND's effects were rolled back (also: usage errors, a failed abort);\n"
      "  126  COMMAND could not be executed;  127  COMMAND was not found.");

  begin_ = app.add_subcommand("begin",
                              "Begin a transaction for a process (default: the calling "
                              "shell) and print its id");
  begin_->add_option("MOUNT", opt_.mount, mount_help)->required();
  begin_
      ->add_option("--pid", opt_.pid,
                   "bind this process and the processes it starts afterwards "
                   "(default: the parent of txnfs, i.e. the calling shell)")
      ->type_name("PID")
      ->check(CLI::Range(1, INT32_MAX).description(""));
  begin_->footer(
      "Prints the transaction id alone on stdout:  id=$(txnfs begin /mnt)\n"
      "(bash and dash run a command substitution's last command in place, so the bound\n"
      "process is the shell itself). Every request the bound process and its later children\n"
      "make on MOUNT belongs to the transaction until `txnfs commit MOUNT ID` or\n"
      "`txnfs abort MOUNT ID`; if the process exits first, the transaction is aborted.\n"
      "Exit status: 0, or 1 on error.");

  commit_ = app.add_subcommand("commit", "Commit a transaction");
  commit_->add_option("MOUNT", opt_.mount, mount_help)->required();
  commit_->add_option("ID", opt_.id, "the transaction id (from `txnfs begin`)")->required();
  commit_->add_flag("--lazy", opt_.lazy,
                    "commit lazily: final and visible at once, durable within the mount's "
                    "--lazy-flush-ms or at the next `txnfs sync` (a crash before then rolls "
                    "it back whole, and only after every later one)");
  commit_->footer(
      "Prints nothing on success. Exit status: 0 committed; 1 error -- e.g. no such\n"
      "open transaction, not yours, abort-only (it lost a deadlock; abort it), or the\n"
      "commit failed and the transaction was rolled back.");

  abort_ = app.add_subcommand("abort", "Abort a transaction, rolling back all its effects");
  abort_->add_option("MOUNT", opt_.mount, mount_help)->required();
  abort_->add_option("ID", opt_.id, "the transaction id (from `txnfs begin`)")->required();
  abort_->footer("Prints nothing on success. Exit status: 0 aborted; 1 error.");

  sync_ = app.add_subcommand("sync", "Make every commit on a mount durable, lazy ones included");
  sync_->add_option("MOUNT", opt_.mount, mount_help)->required();
  sync_->footer(
      "Returns once every transaction committed before it is durable.\n"
      "Exit status: 0, or 1 on error.");

  status_ = app.add_subcommand("status", "Show a mount's open transactions and counters");
  status_->add_option("MOUNT", opt_.mount, mount_help)->required();
  status_->add_flag("--json", opt_.json, "print the daemon's JSON as it is");
  status_->footer(
      "Columns: ID, STATE, owner UID, bound PID, BOUND (thread or process), AGE, OPS\n"
      "(operations done), BACKUP (data backed up for undo), LOCKS (held), WAITING (locks\n"
      "awaited), ERROR (why it is abort-only). Exit status: 0, or 1 on error.");
}

std::vector<const char *> TxnCommands::split_run_command(int argc, const char *const *argv) {
  std::vector<const char *> args(argv, argv + argc);
  if (argc < 2 || std::string_view(argv[1]) != "run") return args;
  // Scan run's own arguments: flags (run has no option that takes a value) and MOUNT.
  // The first word after MOUNT, or everything after "--", starts the command.
  args.resize(2);
  bool have_mount = false;
  int i = 2;
  for (; i < argc; i++) {
    std::string_view a = argv[i];
    if (a == "--") {
      i++;
      if (!have_mount && i < argc) args.push_back(argv[i++]);
      break;
    }
    if (a.size() > 1 && a[0] == '-') {
      args.push_back(argv[i]);
    } else if (!have_mount) {
      args.push_back(argv[i]);
      have_mount = true;
    } else {
      break;
    }
  }
  opt_.command.assign(argv + i, argv + argc);
  return args;
}

bool TxnCommands::selected() const {
  return run_->parsed() || begin_->parsed() || commit_->parsed() || abort_->parsed() ||
         status_->parsed() || sync_->parsed();
}

int TxnCommands::usage_exit_status() const { return run_->parsed() ? kRunTxnFailed : kUsage; }

int TxnCommands::execute() {
  try {
    if (run_->parsed()) return cmd_run(opt_);
    if (begin_->parsed()) return cmd_begin(opt_);
    if (commit_->parsed()) return cmd_end(opt_, true);
    if (abort_->parsed()) return cmd_end(opt_, false);
    if (status_->parsed()) return cmd_status(opt_);
    if (sync_->parsed()) return cmd_sync(opt_);
  } catch (const std::exception &e) {
    print_error(e.what());
    return run_->parsed() ? kRunTxnFailed : 1;
  }
  return kUsage;
}

}  // namespace txnfs::cli
