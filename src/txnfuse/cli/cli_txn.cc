// txnfs run / begin / commit / abort / status — see exit_status.h for the exit statuses.
#include "txnfuse/cli/cli_txn.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "txnfuse/cli/exit_status.h"
#include "txnfuse/cli/spawn.h"

namespace txnfs::cli {

namespace {

void print_error(const std::string &msg, const std::string &hint = {}) {
  fmt::print(stderr, "txnfs: error: {}\n", msg);
  if (!hint.empty()) fmt::print(stderr, "  hint: {}\n", hint);
}

// "cannot access MOUNT: ..." if MOUNT cannot be stat'ed, so that a missing path is not
// mistaken for a missing transaction (both are ENOENT).
bool check_mount_path(const std::string &mount) {
  struct stat st;
  if (::stat(mount.c_str(), &st) == 0) return true;
  int err = errno;
  if (err == ENOTCONN)
    print_error(fmt::format("cannot access {}: {} (its txnfs daemon is gone)", mount,
                            std::strerror(err)),
                "clean the dead mount up with `umount -l MOUNTPOINT`, then mount it again");
  else
    print_error(fmt::format("cannot access {}: {}", mount, std::strerror(err)));
  return false;
}

void print_outcome(const std::string &line) { fmt::print(stderr, "txnfs: {}\n", line); }

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
  return err != ENOENT && err != EPERM && err != ENOTTY && err != ENOTCONN && err != EIO;
}

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
    fmt::print(stderr, "txnfs: warning: transaction {} was no longer open, nothing to abort ({})\n",
               id, why);
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

  RunResult r = spawn_and_wait(o.command);
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
  rc = ::txnfs_commit(o.mount.c_str(), id);
  if (rc == 0) {
    print_outcome(run_summary_committed(id, ops));
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
    print_error(fmt::format("invalid transaction id '{}' (expected a positive integer, as "
                            "printed by `txnfs begin`)", o.id));
    return 1;
  }
  if (!check_mount_path(o.mount)) return 1;
  int rc = commit ? ::txnfs_commit(o.mount.c_str(), *id) : ::txnfs_abort(o.mount.c_str(), *id);
  if (rc == 0) return 0;
  std::string msg = txn_error_message(commit ? Action::Commit : Action::Abort, -rc, o.mount, *id);
  std::string hint;
  if (commit && commit_refusal_may_leave_open(-rc)) {
    std::optional<bool> open = still_open(o.mount, *id);
    if (open == false)
      msg += "; the transaction was rolled back";
    else if (open == true)
      hint = fmt::format("it can only abort now: txnfs abort {} {}", o.mount, *id);
  }
  print_error(msg, hint);
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
    fmt::print(stderr, "txnfs: warning: the daemon shortened the status to fit the control "
                       "channel; it may be incomplete\n");
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

// ---- status table -----------------------------------------------------------------------

using nlohmann::json;

std::optional<uint64_t> u64_field(const json &obj, const char *key) {
  auto it = obj.find(key);
  if (it == obj.end()) return std::nullopt;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer() && it->get<int64_t>() >= 0)
    return static_cast<uint64_t>(it->get<int64_t>());
  return std::nullopt;
}

std::optional<int64_t> i64_field(const json &obj, const char *key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return std::nullopt;
  if (it->is_number_unsigned())
    return it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
               ? std::nullopt
               : std::optional<int64_t>(static_cast<int64_t>(it->get<uint64_t>()));
  return it->get<int64_t>();
}

template <class T>
std::string or_dash(const std::optional<T> &v) {
  return v ? fmt::format("{}", *v) : std::string("-");
}

std::string state_of(const json &t) {
  auto it = t.find("state");
  if (it == t.end()) return "-";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number_unsigned()) return state_name(it->get<unsigned>());
  return "?";
}

std::string error_of(const json &t) {
  auto it = t.find("error");
  if (it == t.end()) return "-";
  if (it->is_string()) return it->get<std::string>().empty() ? "-" : it->get<std::string>();
  std::optional<int64_t> e = i64_field(t, "error");
  if (!e || *e == 0) return "-";
  const char *name = *e > 0 && *e < 4096 ? ::strerrorname_np(static_cast<int>(*e)) : nullptr;
  return name ? std::string(name) : fmt::format("{}", *e);
}

std::string bound_of(const json &t) {
  std::optional<uint64_t> f = u64_field(t, "flags");
  if (!f) return "-";
  return (*f & TXNFS_BIND_PROCESS) ? "process" : "thread";
}

// Columns, each left- or right-aligned, two spaces apart; no trailing blanks.
std::string render_table(const std::vector<std::string> &header, const std::vector<bool> &right,
                         const std::vector<std::vector<std::string>> &rows) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); c++) width[c] = header[c].size();
  for (auto &row : rows)
    for (size_t c = 0; c < row.size(); c++) width[c] = std::max(width[c], row[c].size());
  std::string out;
  auto line = [&](const std::vector<std::string> &cells) {
    std::string l;
    for (size_t c = 0; c < cells.size(); c++) {
      if (c) l += "  ";
      size_t pad = width[c] - cells[c].size();
      if (right[c]) l.append(pad, ' ');
      l += cells[c];
      if (!right[c]) l.append(pad, ' ');
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line(header);
  for (auto &row : rows) line(row);
  return out;
}

}  // namespace

// ---- the pure helpers ---------------------------------------------------------------------

std::optional<txnfs_id_t> parse_txn_id(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  for (char c : s)
    if (c < '0' || c > '9') return std::nullopt;
  txnfs_id_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v == 0) return std::nullopt;
  return v;
}

std::string txn_error_message(Action action, int err, const std::string &mount, txnfs_id_t id,
                              pid_t pid) {
  if (err == ENOTTY)
    return fmt::format("{} is not on a txnfs mount (or its daemon does not support transactions)",
                       mount);
  if (err == ENOTCONN)
    return fmt::format("{}: {} (its txnfs daemon is gone)", mount, std::strerror(err));
  std::string what;  // "cannot WHAT: strerror" for everything without a better message
  switch (action) {
    case Action::Begin:
      if (err == EBUSY)
        return pid == 0 ? fmt::format("this process is already in a transaction on {} "
                                      "(transactions do not nest)", mount)
                        : fmt::format("process {} is already in a transaction on {} "
                                      "(transactions do not nest)", pid, mount);
      if (err == ESRCH) return fmt::format("no process {}", pid);
      if (err == EPERM)
        return fmt::format("not allowed to bind process {} to a transaction (it is not yours)",
                           pid == 0 ? ::getpid() : pid);
      what = fmt::format("begin a transaction on {}", mount);
      break;
    case Action::Commit:
    case Action::Abort:
    case Action::Info: {
      const char *verb = action == Action::Commit ? "commit"
                         : action == Action::Abort ? "abort"
                                                   : "inspect";
      if (err == ENOENT) return fmt::format("no open transaction {} on {}", id, mount);
      if (err == EPERM)
        return fmt::format("transaction {} is not yours (only its owner or root may {} it)", id,
                           verb);
      if (action == Action::Commit && err == EDEADLK)
        return fmt::format("transaction {} can only abort (it lost a deadlock or a lock wait): "
                           "commit refused", id);
      if (action == Action::Commit && err == ETIMEDOUT)
        return fmt::format("transaction {} can only abort (a lock wait timed out): "
                           "commit refused", id);
      if (action == Action::Commit && err == EIO)
        return fmt::format("commit of transaction {} failed; the transaction was rolled back", id);
      what = fmt::format("{} transaction {} on {}", verb, id, mount);
      break;
    }
    case Action::Status:
      what = fmt::format("get the status of {}", mount);
      break;
  }
  return fmt::format("cannot {}: {}", what, std::strerror(err));
}

std::string run_summary_committed(txnfs_id_t id, std::optional<uint64_t> ops) {
  if (!ops) return fmt::format("transaction {} committed", id);
  return fmt::format("transaction {} committed ({} operation{})", id, *ops, *ops == 1 ? "" : "s");
}

std::string run_summary_aborted(txnfs_id_t id, const std::string &why) {
  return fmt::format("transaction {} aborted ({})", id, why);
}

std::string format_age(uint64_t ms) {
  if (ms < 1000) return fmt::format("{}ms", ms);
  if (ms < 60'000) return fmt::format("{}.{}s", ms / 1000, ms % 1000 / 100);
  uint64_t s = ms / 1000;
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{:02}h", s / 86400, s % 86400 / 3600);
}

std::string format_bytes(uint64_t bytes) {
  if (bytes == 0) return "0";
  if (bytes < 1024) return fmt::format("{}B", bytes);
  static const char units[] = "KMGTPE";
  double v = static_cast<double>(bytes) / 1024;
  size_t u = 0;
  while (v >= 1024 && u + 1 < sizeof units - 1) {
    v /= 1024;
    u++;
  }
  return fmt::format("{:.1f}{}", v, units[u]);
}

std::string state_name(unsigned state) {
  switch (state) {
    case TXNFS_ACTIVE: return "active";
    case TXNFS_ABORT_ONLY: return "abort-only";
    case TXNFS_COMMITTING: return "committing";
    case TXNFS_COMMITTED: return "committed";
    case TXNFS_ABORTED: return "aborted";
  }
  return fmt::format("state-{}", state);
}

std::string format_status(std::string_view text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception &e) {
    throw std::runtime_error(fmt::format("not valid JSON ({})", e.what()));
  }
  if (!j.is_object()) throw std::runtime_error("not a JSON object");
  std::string out;

  auto txs = j.find("transactions");
  if (txs != j.end() && !txs->is_array())
    throw std::runtime_error("\"transactions\" is not an array");
  std::vector<std::vector<std::string>> rows;
  if (txs != j.end())
    for (const json &t : *txs) {
      if (!t.is_object()) throw std::runtime_error("a transaction is not a JSON object");
      std::optional<uint64_t> age = u64_field(t, "age_ms"), bytes = u64_field(t, "backup_bytes");
      rows.push_back({or_dash(u64_field(t, "id")), state_of(t), or_dash(u64_field(t, "uid")),
                      or_dash(i64_field(t, "pid")), bound_of(t), age ? format_age(*age) : "-",
                      or_dash(u64_field(t, "ops")), bytes ? format_bytes(*bytes) : "-",
                      or_dash(u64_field(t, "locks_held")), or_dash(u64_field(t, "locks_waiting")),
                      error_of(t)});
    }
  if (rows.empty()) {
    out += "no open transactions\n";
  } else {
    out += render_table({"ID", "STATE", "UID", "PID", "BOUND", "AGE", "OPS", "BACKUP", "LOCKS",
                         "WAITING", "ERROR"},
                        {true, false, true, true, false, true, true, true, true, true, false},
                        rows);
  }

  auto counters = j.find("counters");
  if (counters != j.end()) {
    if (!counters->is_object()) throw std::runtime_error("\"counters\" is not an object");
    static const char *const known[] = {"commits", "aborts", "deadlocks", "timeouts",
                                        "recoveries"};
    std::vector<std::string> parts;
    auto add = [&](const std::string &k) {
      parts.push_back(fmt::format("{} {}", k, or_dash(u64_field(*counters, k.c_str()))));
    };
    for (const char *k : known)
      if (counters->contains(k)) add(k);
    for (auto it = counters->begin(); it != counters->end(); ++it) {
      bool is_known = false;
      for (const char *k : known) is_known |= it.key() == k;
      if (!is_known) add(it.key());
    }
    std::string line = "counters:";
    for (size_t i = 0; i < parts.size(); i++) line += (i ? ", " : " ") + parts[i];
    out += line + "\n";
  }
  return out;
}

std::string failure_message(const CLI::App *app, const CLI::Error &e) {
  return "txnfs: error: " + CLI::FailureMessage::simple(app, e);
}

// ---- the subcommands ---------------------------------------------------------------------

TxnCommands::TxnCommands(CLI::App &app) {
  const char *mount_help = "the txnfs mount point (or any file or directory inside it)";

  run_ = app.add_subcommand("run", "Run a command as one transaction: commit if it succeeds, "
                                   "abort if it fails");
  run_->add_option("MOUNT", opt_.mount, mount_help)->required();
  run_->add_flag("--abort", opt_.abort,
                 "abort the transaction even if the command succeeds (a dry run)");
  // Only for --help: split_run_command() takes the command out before CLI11 parses.
  run_->add_option("COMMAND", help_only_command_,
                   "the command and its arguments: everything after MOUNT (or after --)");
  run_->footer(
      "Usage: txnfs run [--abort] MOUNT [--] COMMAND [ARGS...]\n"
      "Options of txnfs run go before COMMAND; everything from COMMAND on is passed to it.\n"
      "\n"
      "Begins a transaction bound to txnfs's own process, then runs COMMAND (looked up in\n"
      "PATH) as its child: everything COMMAND and the processes it starts do on MOUNT belongs\n"
      "to the transaction. If COMMAND exits with status 0 the transaction commits, otherwise\n"
      "(or with --abort) it aborts and every effect on MOUNT is rolled back. SIGINT, SIGTERM\n"
      "and SIGHUP sent to txnfs are forwarded to COMMAND. One line on stderr tells the outcome.\n"
      "\n"
      "Exit status: COMMAND's own, or 128+N if signal N killed it;\n"
      "  125  the transaction could not begin (COMMAND did not run), or the commit failed:\n"
      "       COMMAND's effects were rolled back (also: usage errors, a failed abort);\n"
      "  126  COMMAND could not be executed;  127  COMMAND was not found.");

  begin_ = app.add_subcommand("begin", "Begin a transaction for a process (default: the calling "
                                       "shell) and print its id");
  begin_->add_option("MOUNT", opt_.mount, mount_help)->required();
  begin_->add_option("--pid", opt_.pid,
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
  commit_->footer("Prints nothing on success. Exit status: 0 committed; 1 error -- e.g. no such\n"
                  "open transaction, not yours, abort-only (it lost a deadlock; abort it), or the\n"
                  "commit failed and the transaction was rolled back.");

  abort_ = app.add_subcommand("abort", "Abort a transaction, rolling back all its effects");
  abort_->add_option("MOUNT", opt_.mount, mount_help)->required();
  abort_->add_option("ID", opt_.id, "the transaction id (from `txnfs begin`)")->required();
  abort_->footer("Prints nothing on success. Exit status: 0 aborted; 1 error.");

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
         status_->parsed();
}

int TxnCommands::usage_exit_status() const { return run_->parsed() ? kRunTxnFailed : kUsage; }

int TxnCommands::execute() {
  try {
    if (run_->parsed()) return cmd_run(opt_);
    if (begin_->parsed()) return cmd_begin(opt_);
    if (commit_->parsed()) return cmd_end(opt_, true);
    if (abort_->parsed()) return cmd_end(opt_, false);
    if (status_->parsed()) return cmd_status(opt_);
  } catch (const std::exception &e) {
    print_error(e.what());
    return run_->parsed() ? kRunTxnFailed : 1;
  }
  return kUsage;
}

}  // namespace txnfs::cli
