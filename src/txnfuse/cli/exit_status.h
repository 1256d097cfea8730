// The exit statuses of the transaction subcommands (run, begin, commit, abort, status).
//
//   begin, commit, abort, status:  0 success; 1 error (message on stderr)
//   run:  the command's own exit status, or 128+N if a signal N killed it;
//         125  txnfs failed: the transaction could not begin (the command did not run),
//              or its commit (or abort) failed -- after a failed commit the command's
//              effects were rolled back;
//         126  the command was found but could not be executed (transaction aborted);
//         127  the command was not found (transaction aborted).
//   usage errors: 2 (125 for run).
//
// 125-127 are those of env(1) and nice(1), so that a script can tell txnfs's failure
// from the command's.
#pragma once

namespace txnfs::cli {

// Exit statuses of `txnfs run` other than the command's own.
inline constexpr int kRunTxnFailed = 125;
inline constexpr int kRunCannotExec = 126;
inline constexpr int kRunNotFound = 127;
inline constexpr int kUsage = 2;

}  // namespace txnfs::cli
