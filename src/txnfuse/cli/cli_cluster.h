// `txnfs resolve`: ends a prepared transaction by hand, as its cluster decided
// (docs/cluster.md). The decision comes from etcd, never from the operator: with
// --abort-if-undecided and no decision yet, ABORT is written by compare-and-swap first
// (presumed abort), and whatever decision then exists is applied.
#pragma once
#include <string>

namespace txnfs::cli {

// Exit status: 0 resolved (or not prepared here any more), 1 error, 3 no decision yet.
int resolve_command(const std::string &mountpoint, const std::string &gid,
                    const std::string &cluster_conf, bool abort_if_undecided);

}  // namespace txnfs::cli
