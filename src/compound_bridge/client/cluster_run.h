// txnfs-nfs --cluster FILE: a batch over the nodes of a txnfs cluster (the CLI's; it is
// built into txnfs-nfs only).
//
// The cluster map (src/cluster: which node holds each top-level directory, each node's
// host) is read from etcd; partition() (route.h) gives each operation its node. One node:
// one COMPOUND to it, as without --cluster. Several nodes with --txn: two-phase commit,
// the client coordinating:
//
//   1. gid = new_gid(); every node gets its part, in parallel, as one COMPOUND tagged
//      `txn-prepare:<gid>` (NFS4_OK: prepared; an NFS error: rolled back).
//   2. all prepared: decide(gid, commit) in etcd, else decide(gid, abort) (compare-and-
//      swap: the decision that exists afterwards is the outcome, ours or an earlier one).
//   3. `txn-commit:<gid>` or `txn-abort:<gid>` (SEQUENCE, PUTROOTFH) to every node that
//      prepared or whose answer was lost, in parallel; NFS4ERR_DELAY is retried; a node
//      that cannot be reached resolves the transaction itself from etcd.
//
// Several nodes without a tag: each node's part as a plain COMPOUND, in turn (not atomic).
//
// Test hook (environment): TXNFS_NFS_2PC_STOP=after-prepare kills this process with
// SIGKILL once every prepare has answered (before the decision); =after-decision once
// the decision is in etcd (before any commit or abort is sent).
#pragma once
#include <cstddef>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compound_bridge/client/nfs_client.h"
#include "compound_bridge/client/report.h"

namespace txnfs::nfs::cli {

// Sends a Compound with a tag (retrying NFS4ERR_DELAY as the CLI does), filling RunInfo.
using Executor = std::function<CompoundResult(Compound &, const std::string &, RunInfo &)>;

struct ClusterOptions {
  ClientOptions client;  // port, export, limits; `server` is each node's host
  std::string conf;      // the cluster configuration file
  bool txn = false;      // --txn: several nodes run as one transaction (two-phase commit)
  std::string tag;       // the tag of a one-node batch without --txn ("" for none)
  Executor execute;
};

struct NodeRun {
  std::string node, host;
  std::vector<size_t> ops;  // the batch's indices of its operations
  CompoundResult result;    // its COMPOUND (with --txn on several nodes: the prepare)
  RunInfo info;
  std::string error;   // a connection or protocol error: what the node did is unknown
  std::string finish;  // two-phase: "NFS4_OK", an NFS error, "error: ...", "" (not sent)
};

struct ClusterResult {
  CompoundResult merged;  // one OpResult per operation of the batch, in its order
  std::vector<NodeRun> nodes;
  bool two_phase = false;
  std::string gid;
  std::string decision;  // two-phase: "commit", "abort" or "unknown"
  bool outcome_known = true;
  double prepare_ms = 0, decide_ms = 0, finish_ms = 0;
  std::vector<std::string> notes;  // for stderr
  std::string status;              // the report's status: NFS4_OK, an NFS error, "aborted", "error"
  int exit = 0;
  std::optional<Fit> too_big;  // a node's part does not fit its session: nothing was sent
  std::string too_big_node;
  size_t too_big_ops = 0;
};

// Throws Error for what stops the batch before anything was sent: the configuration,
// etcd unreachable while reading the map, a path the map cannot place, a rename or link
// across nodes, a node that cannot be connected to, a bad TXNFS_NFS_2PC_STOP.
ClusterResult run_cluster(const ClusterOptions &o, const std::vector<Operation> &ops);

void print_cluster(std::ostream &out, const ClusterResult &r);
nlohmann::ordered_json cluster_json(const ClusterResult &r);

}  // namespace txnfs::nfs::cli
