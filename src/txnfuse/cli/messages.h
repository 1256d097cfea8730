// What the transaction subcommands say on stderr: the error for each errno a request to
// the daemon can return, the outcome line of `txnfs run`, and the prefixes they are
// printed with ("txnfs: error: ", "txnfs: warning: ", "txnfs: ").
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "txnfs/txnfs.h"

namespace txnfs::cli {

enum class Action { Begin, Commit, Abort, Info, Status };
// The message (without the "txnfs: error: " prefix) for ERR (positive errno) returned by
// ACTION on MOUNT for transaction ID (Begin: PID is the process to bind, 0 = caller).
std::string txn_error_message(Action action, int err, const std::string &mount, txnfs_id_t id = 0,
                              pid_t pid = 0);

// The one line `txnfs run` prints at its end, without the "txnfs: " prefix and newline:
// "transaction 42 committed (17 operations)", "transaction 42 aborted (--abort)", ...
std::string run_summary_committed(txnfs_id_t id, std::optional<uint64_t> ops);
std::string run_summary_aborted(txnfs_id_t id, const std::string &why);

// "txnfs: error: MSG" on stderr, and "  hint: HINT" below it unless HINT is empty.
void print_error(const std::string &msg, const std::string &hint = {});
// "txnfs: warning: MSG" on stderr.
void print_warning(const std::string &msg);
// "txnfs: LINE" on stderr: the outcome of `txnfs run`.
void print_outcome(const std::string &line);

}  // namespace txnfs::cli
