// The error and outcome messages of the transaction subcommands, and their printing.
#include "txnfuse/cli/messages.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

namespace txnfs::cli {

std::string txn_error_message(Action action, int err, const std::string &mount, txnfs_id_t id,
                              pid_t pid) {
  if (err == ENOTTY)
    return fmt::format("{} is not on a txnfs mount (or its daemon does not support transactions)",
                       mount);
  // (ECONNABORTED: what a mount served over FUSE's io_uring answers once its daemon died.)
  if (err == ENOTCONN || err == ECONNABORTED)
    return fmt::format("{}: {} (its txnfs daemon is gone)", mount, std::strerror(err));
  std::string what;  // "cannot WHAT: strerror" for everything without a better message
  switch (action) {
    case Action::Begin:
      if (err == EBUSY)
        return pid == 0 ? fmt::format(
                              "this process is already in a transaction on {} "
                              "(transactions do not nest)",
                              mount)
                        : fmt::format(
                              "process {} is already in a transaction on {} "
                              "(transactions do not nest)",
                              pid, mount);
      if (err == ESRCH) return fmt::format("no process {}", pid);
      if (err == EPERM)
        return fmt::format("not allowed to bind process {} to a transaction (it is not yours)",
                           pid == 0 ? ::getpid() : pid);
      what = fmt::format("begin a transaction on {}", mount);
      break;
    case Action::Commit:
    case Action::Abort:
    case Action::Info: {
      const char *verb = action == Action::Commit  ? "commit"
                         : action == Action::Abort ? "abort"
                                                   : "inspect";
      if (err == ENOENT) return fmt::format("no open transaction {} on {}", id, mount);
      if (err == EPERM)
        return fmt::format("transaction {} is not yours (only its owner or root may {} it)", id,
                           verb);
      if (action == Action::Commit && err == EDEADLK)
        return fmt::format(
            "transaction {} can only abort (it lost a deadlock or a lock wait): "
            "commit refused",
            id);
      if (action == Action::Commit && err == ETIMEDOUT)
        return fmt::format(
            "transaction {} can only abort (a lock wait timed out): "
            "commit refused",
            id);
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

void print_error(const std::string &msg, const std::string &hint) {
  fmt::print(stderr, "txnfs: error: {}\n", msg);
  if (!hint.empty()) fmt::print(stderr, "  hint: {}\n", hint);
}

void print_warning(const std::string &msg) { fmt::print(stderr, "txnfs: warning: {}\n", msg); }

void print_outcome(const std::string &line) { fmt::print(stderr, "txnfs: {}\n", line); }

}  // namespace txnfs::cli
