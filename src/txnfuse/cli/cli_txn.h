// The transaction subcommands of the txnfs CLI: run, begin, commit, abort, status, sync.
// They are clients of the daemon's control channel through libtxnfs (include/txnfs/txnfs.h).
// Their exit statuses are listed in exit_status.h.
#pragma once
#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "txnfs/txnfs.h"

namespace txnfs::cli {

struct TxnOptions {
  std::string mount;
  // run
  bool abort = false;
  std::vector<std::string> command;
  // begin
  pid_t pid = 0;  // 0: the parent of txnfs (the calling shell)
  // commit, abort
  std::string id;
  // run, commit: commit lazily (TXNFS_COMMIT_LAZY)
  bool lazy = false;
  bool no_view = false;  // run: bound by process id alone, not through the view
  // status
  bool json = false;
};

// Adds the subcommands to APP; after APP parsed the command line, selected() says
// whether one of them was chosen and execute() runs it and returns the exit status.
class TxnCommands {
 public:
  explicit TxnCommands(CLI::App &app);
  TxnCommands(const TxnCommands &) = delete;
  TxnCommands &operator=(const TxnCommands &) = delete;

  // `txnfs run` passes everything after MOUNT (or after --) to the command unparsed, as
  // env and nice do; CLI11 cannot express that. So main() first lets this take the
  // command out of ARGV, and gives CLI11 the arguments it returns (same lifetime as ARGV).
  std::vector<const char *> split_run_command(int argc, const char *const *argv);

  bool selected() const;
  int execute();
  // The exit status for a command line that did not parse.
  int usage_exit_status() const;
  const TxnOptions &options() const { return opt_; }

 private:
  TxnOptions opt_;
  std::vector<std::string> help_only_command_;
  CLI::App *run_, *begin_, *commit_, *abort_, *status_, *sync_;
};

// CLI11's failure message with the "txnfs: error: " prefix of every txnfs error.
std::string failure_message(const CLI::App *app, const CLI::Error &e);

// "42" -> 42; nullopt for anything but a positive decimal integer that fits.
std::optional<txnfs_id_t> parse_txn_id(std::string_view s);

}  // namespace txnfs::cli
