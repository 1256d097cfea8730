// The recovery subcommands of the txnfs CLI (main.cc registers them):
//
//   txnfs recover STORE [--force] [--verbose]
//                                   roll back / finish what a crash left; print a summary
//   txnfs fsck STORE [--repair [--accept-damage]]
//                                   check (and repair) database, tree, recovery state and
//                                   the damage mark
//   txnfs crash-points              (hidden) the crash-injection points, one per line
//   txnfs fault-points              (hidden) the fault-injection points, one per line
//
// Each returns the process exit status; Error propagates to main (exit 1, fsck 2).
#pragma once
#include <string>

namespace txnfs::cli {

// 0: recovered (or nothing to do); 1: steps could not be undone (--force), printed.
// `cluster_conf`: the node's cluster configuration, for the decisions of prepared
// transactions (empty: a store with one is refused).
int recover_command(const std::string &store, bool force, bool verbose = false,
                    const std::string &cluster_conf = {});

// 0 clean (after repair, with --repair), 1 problems remain (each printed).
// accept_damage (with repair): clears the damage mark that existed before this run.
int fsck_command(const std::string &store, bool repair, bool accept_damage = false);

// "NAME<TAB>WHERE<TAB>WHAT IT TESTS" per point; 0.
int crash_points_command();
// "NAME<TAB>WHERE<TAB>WHAT THE CALLER SEES" per point; 0.
int fault_points_command();

}  // namespace txnfs::cli
