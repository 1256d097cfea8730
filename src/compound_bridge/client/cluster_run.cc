#include "compound_bridge/client/cluster_run.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "cluster/cluster_conf.h"
#include "cluster/cluster_map.h"
#include "cluster/decisions.h"
#include "cluster/etcd.h"
#include "compound_bridge/client/route.h"

namespace txnfs::nfs::cli {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kFinishDelayRetries = 5;  // NFS4ERR_DELAY answers to a commit or abort
constexpr int kDecideTries = 2;         // a timed-out decide is asked again once

enum class Stop { kNone, kAfterPrepare, kAfterDecision };

Stop stop_point() {
  const char *v = std::getenv("TXNFS_NFS_2PC_STOP");
  if (v == nullptr || *v == '\0') return Stop::kNone;
  std::string s(v);
  if (s == "after-prepare") return Stop::kAfterPrepare;
  if (s == "after-decision") return Stop::kAfterDecision;
  throw Error("TXNFS_NFS_2PC_STOP=" + s + ": give after-prepare or after-decision");
}

// The test hook: say where, then die as a crash would (no cleanup, no finish).
void stop_here(Stop want, Stop here, const std::string &gid) {
  if (want != here) return;
  const char *name = here == Stop::kAfterPrepare ? "after-prepare" : "after-decision";
  std::cout.flush();
  std::cerr << "txnfs-nfs: TXNFS_NFS_2PC_STOP=" << name << ": killing myself (SIGKILL), gid="
            << gid << std::endl;
  std::raise(SIGKILL);
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Runs F(i) for i in [0, n) on a thread each and waits for all.
template <typename F>
void in_parallel(size_t n, F f) {
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (size_t i = 0; i < n; i++) threads.emplace_back([&f, i] { f(i); });
  for (std::thread &t : threads) t.join();
}

ClientOptions options_for(const ClusterOptions &o, const std::string &host) {
  ClientOptions c = o.client;
  c.server = host;
  return c;
}

// Each node's result put back in the batch's order; counters summed.
CompoundResult merge(const std::vector<NodeRun> &nodes, const std::vector<Operation> &ops,
                     const std::string &tag) {
  CompoundResult m;
  m.tag = tag;
  m.ops.resize(ops.size());
  for (size_t i = 0; i < ops.size(); i++) {
    m.ops[i].kind = ops[i].kind;
    m.ops[i].path = ops[i].path;
    m.ops[i].path2 = ops[i].path2;
  }
  for (const NodeRun &n : nodes) {
    for (size_t k = 0; k < n.ops.size() && k < n.result.ops.size(); k++) {
      m.ops[n.ops[k]] = n.result.ops[k];
    }
    m.nfs_ops += n.result.nfs_ops;
    m.nfs_results += n.result.nfs_results;
    m.request_bytes += n.result.request_bytes;
    m.reply_bytes += n.result.reply_bytes;
  }
  // The status of the first operation (in the batch's order) that failed, else that of
  // a node whose COMPOUND failed as a whole.
  for (const OpResult &op : m.ops) {
    if (op.state == OpResult::State::kFailed) {
      m.status = op.status;
      m.failed_at = op.failed_at;
      return m;
    }
  }
  for (const NodeRun &n : nodes) {
    if (!n.error.empty() || n.result.ok()) continue;
    m.status = n.result.status;
    m.failed_at = n.result.failed_at;
    break;
  }
  return m;
}

struct Node {
  NodeRun run;
  std::vector<Operation> ops;  // its part (copies referring to the batch's data)
  std::unique_ptr<Client> client;
  std::unique_ptr<Compound> compound;
};

// Connects to every node in parallel; throws Error naming the first that failed.
void connect_all(const ClusterOptions &o, std::vector<Node> &nodes) {
  std::vector<std::string> errors(nodes.size());
  in_parallel(nodes.size(), [&](size_t i) {
    try {
      nodes[i].client = std::make_unique<Client>(options_for(o, nodes[i].run.host));
    } catch (const Error &e) {
      errors[i] = e.what();
    }
  });
  for (size_t i = 0; i < nodes.size(); i++) {
    if (!errors[i].empty()) {
      throw Error(fmt::format("cannot connect to node {} ({}:{}): {}; nothing was sent",
                              nodes[i].run.node, nodes[i].run.host, o.client.port, errors[i]));
    }
  }
}

// Builds each node's Compound; false (and R.too_big) when one does not fit.
bool build_all(std::vector<Node> &nodes, const std::string &tag, ClusterResult &r) {
  for (Node &n : nodes) {
    n.compound = std::make_unique<Compound>(*n.client);
    for (const Operation &op : n.ops) n.compound->add(op);
    Fit fit = n.compound->fit(tag);
    if (!fit.fits) {
      r.too_big = fit;
      r.too_big_node = n.run.node;
      r.too_big_ops = n.ops.size();
      return false;
    }
  }
  return true;
}

// Sends node N its part with TAG; a connection or protocol failure goes to run.error.
void send_part(const ClusterOptions &o, Node &n, const std::string &tag) {
  try {
    n.run.result = o.execute(*n.compound, tag, n.run.info);
  } catch (const Error &e) {
    n.run.error = e.what();
    n.run.result = CompoundResult{};
    n.run.result.tag = tag;
    n.client.reset();  // unusable after a failed call
  }
}

// txn-commit:GID / txn-abort:GID to node N; reconnects once when its connection broke.
std::string finish_node(const ClusterOptions &o, Node &n, const std::string &tag) {
  std::string error;
  const int attempts = n.client ? 2 : 1;  // a node that did not answer: one new connection
  for (int attempt = 0; attempt < attempts; attempt++) {
    try {
      if (!n.client) n.client = std::make_unique<Client>(options_for(o, n.run.host));
      std::chrono::milliseconds backoff(50);
      CompoundResult r;
      for (int retry = 0;; retry++) {
        r = n.client->tag_only(tag);
        if (r.status != kNfs4ErrDelay || retry == kFinishDelayRetries) break;
        std::this_thread::sleep_for(backoff);
        backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
      }
      return status_name(r.status);
    } catch (const Error &e) {
      error = e.what();
      n.compound.reset();
      n.client.reset();
    }
  }
  return "error: " + error;
}

}  // namespace

ClusterResult run_cluster(const ClusterOptions &o, const std::vector<Operation> &ops) {
  const Stop stop = stop_point();
  std::string why;
  auto conf = cluster::load_cluster_conf(o.conf, &why);
  if (!conf) throw Error(why);
  cluster::Etcd etcd(conf->etcd, conf->etcd_timeout);
  cluster::ClusterMap map(etcd, conf->cluster);
  // As the decision: tried again, since one timeout is about as long as etcd's election
  // of a new leader (a read during it times out, and the next one finds the new leader).
  int rc = 0;
  for (int attempt = 0; attempt < kDecideTries; attempt++)
    if ((rc = map.load(&why)) == 0 || rc == EIO) break;
  if (rc != 0) {
    throw Error("cannot read the cluster map of " + conf->cluster + " from etcd: " + why +
                "; nothing was sent");
  }
  Partition p = partition(ops, map.tops, map.nodes);

  std::vector<Node> nodes(p.nodes.size());
  for (size_t i = 0; i < p.nodes.size(); i++) {
    nodes[i].run.node = p.nodes[i];
    nodes[i].run.host = map.nodes.at(p.nodes[i]);
  }
  for (size_t i = 0; i < ops.size(); i++) {
    Node &n = nodes[p.node_of_op[i]];
    n.run.ops.push_back(i);
    n.ops.push_back(ops[i]);
  }

  ClusterResult r;
  const bool several = nodes.size() > 1;
  if (several && !o.txn && !o.tag.empty()) {
    std::string names;
    for (const Node &n : nodes) names += (names.empty() ? "" : ", ") + n.run.node;
    throw Error(fmt::format(
        "the operations fall on {} nodes ({}): with --cluster, a batch over several nodes "
        "takes --txn (one transaction, two-phase commit) or no tag (each node's part on "
        "its own); not --tag or --lazy",
        nodes.size(), names));
  }

  // Two-phase: a prepare not answered within prepared_timeout counts as failed: the nodes
  // that prepared presume abort by then anyway.
  ClusterOptions co = o;
  if (several && o.txn) {
    co.client.timeout_ms = static_cast<int>(
        std::min<int64_t>(o.client.timeout_ms, conf->prepared_timeout.count()));
  }
  connect_all(co, nodes);

  if (!several || !o.txn) {
    // One COMPOUND per node, as without --cluster (in turn; not atomic across nodes).
    const std::string tag = o.txn ? "txn" : o.tag;
    if (!build_all(nodes, tag, r)) return r;
    for (Node &n : nodes) send_part(o, n, tag);
    for (Node &n : nodes) n.compound.reset();
    for (Node &n : nodes) {
      if (n.client) n.client->close();
    }
    for (Node &n : nodes) r.nodes.push_back(std::move(n.run));
    r.merged = merge(r.nodes, ops, tag);
    bool error = false;
    for (const NodeRun &n : r.nodes) {
      if (n.error.empty()) continue;
      error = true;
      r.notes.push_back(fmt::format("node {} ({}): {}; what it did is unknown", n.node, n.host,
                                    n.error));
    }
    r.status = error ? "error" : status_name(r.merged.status);
    r.exit = error ? 2 : r.merged.ok() ? 0 : 1;
    return r;
  }

  // Two-phase commit.
  r.two_phase = true;
  r.gid = cluster::new_gid();
  const std::string prepare_tag = "txn-prepare:" + r.gid;
  if (!build_all(nodes, prepare_tag, r)) return r;

  // 1. prepare
  auto t0 = Clock::now();
  in_parallel(nodes.size(), [&](size_t i) { send_part(co, nodes[i], prepare_tag); });
  r.prepare_ms = ms_since(t0);
  bool all_prepared = true, lost = false;
  for (const Node &n : nodes) {
    all_prepared = all_prepared && n.run.error.empty() && n.run.result.ok();
    lost = lost || !n.run.error.empty();
  }
  stop_here(stop, Stop::kAfterPrepare, r.gid);

  // 2. decide
  const cluster::Decision want = all_prepared ? cluster::Decision::kCommit : cluster::Decision::kAbort;
  cluster::Decision decision = cluster::Decision::kNone;
  cluster::Decisions decisions(etcd, conf->cluster);
  auto t1 = Clock::now();
  std::string etcd_why;
  for (int attempt = 0; attempt < kDecideTries; attempt++) {
    rc = decisions.decide(r.gid, want, &decision, &etcd_why);
    if (rc == 0 || rc == EIO || rc == EINVAL) break;
  }
  r.decide_ms = ms_since(t1);
  bool etcd_failed = rc != 0;
  if (etcd_failed) {
    if (want == cluster::Decision::kAbort) {
      // Nobody but this client decides commit for its gid: the outcome is abort whatever
      // etcd holds or will hold.
      decision = cluster::Decision::kAbort;
      r.notes.push_back(fmt::format(
          "{}; the decision abort for {} could not be confirmed, but the outcome is "
          "abort (only this client could have decided commit)",
          etcd_why, r.gid));
    } else {
      r.decision = "unknown";
      r.outcome_known = false;
      r.notes.push_back(fmt::format(
          "{}; the decision commit for {} was not confirmed: the outcome is UNKNOWN. "
          "Each prepared node resolves it from etcd itself: commit if the decision reached "
          "etcd, else abort after its prepared_timeout ({} ms)",
          etcd_why, r.gid, conf->prepared_timeout.count()));
    }
  } else {
    stop_here(stop, Stop::kAfterDecision, r.gid);
  }

  // 3. finish
  if (r.outcome_known) {
    r.decision = cluster::name(decision);
    const std::string finish_tag =
        std::string(decision == cluster::Decision::kCommit ? "txn-commit:" : "txn-abort:") + r.gid;
    auto t2 = Clock::now();
    in_parallel(nodes.size(), [&](size_t i) {
      Node &n = nodes[i];
      // A node whose prepare failed with an NFS error rolled back: nothing to finish.
      if (n.run.error.empty() && !n.run.result.ok()) return;
      n.compound.reset();
      n.run.finish = finish_node(co, n, finish_tag);
    });
    r.finish_ms = ms_since(t2);
  }
  for (Node &n : nodes) {
    n.compound.reset();
    if (n.client) n.client->close();
  }

  bool finish_failed = false;
  for (Node &n : nodes) {
    if (!n.run.error.empty()) {
      r.notes.push_back(fmt::format("node {} ({}): prepare: {}; whether it prepared is unknown",
                                    n.run.node, n.run.host, n.run.error));
    }
    if (!n.run.finish.empty() && n.run.finish != status_name(kNfs4Ok)) {
      finish_failed = true;
      r.notes.push_back(fmt::format(
          "node {} ({}) did not confirm {} of {}: {}; {}, and the node resolves it itself "
          "from etcd",
          n.run.node, n.run.host, r.decision, r.gid, n.run.finish,
          etcd_failed ? "the outcome is abort all the same (no decision in etcd: presumed abort)"
                      : "the decision is final (in etcd)"));
    }
    r.nodes.push_back(std::move(n.run));
  }
  r.merged = merge(r.nodes, ops, "txn");
  const bool trouble = etcd_failed || lost || finish_failed;
  if (!r.outcome_known) {
    r.status = "error";
    r.exit = 2;
  } else if (decision == cluster::Decision::kCommit) {
    r.status = status_name(kNfs4Ok);
    r.merged.status = kNfs4Ok;
    r.merged.failed_at.clear();
    r.exit = trouble ? 2 : 0;
  } else {
    bool op_failed = !r.merged.ok();
    r.status = op_failed ? status_name(r.merged.status) : lost ? "error" : "aborted";
    r.exit = trouble ? 2 : 1;
    if (!op_failed && !lost && !etcd_failed) {
      r.notes.push_back("every node prepared, but the decision in etcd was already abort (a "
                        "node gave up waiting for this client): the batch was rolled back");
    }
  }
  if (trouble && r.outcome_known) {
    r.notes.push_back(fmt::format("the outcome of {} is known: {}", r.gid, r.decision));
  }
  return r;
}

void print_cluster(std::ostream &out, const ClusterResult &r) {
  print_ops(out, r.merged);
  for (const NodeRun &n : r.nodes) {
    std::string where = "node=" + n.node + " host=" + n.host;
    if (!n.error.empty()) {
      out << "compound error: " << where << " tag=" << n.result.tag << ": " << n.error << '\n';
    } else {
      out << compound_line(n.result, n.info, where) << '\n';
    }
  }
  if (r.two_phase) {
    out << fmt::format("2pc gid={} decision={} nodes={} prepare_ms={:.3f} decide_ms={:.3f} "
                       "finish_ms={:.3f}\n",
                       r.gid, r.decision, r.nodes.size(), r.prepare_ms, r.decide_ms, r.finish_ms);
  }
}

nlohmann::ordered_json cluster_json(const ClusterResult &r) {
  nlohmann::ordered_json compounds = nlohmann::ordered_json::array();
  double time_ms = 0;
  int retries = 0;
  for (const NodeRun &n : r.nodes) {
    nlohmann::ordered_json c = {{"node", n.node}, {"host", n.host}};
    if (!n.error.empty()) {
      c["status"] = "error";
      c["tag"] = n.result.tag;
      c["error"] = n.error;
    } else {
      nlohmann::ordered_json j = to_json(n.result, n.info);
      j.erase("ops");
      c.update(j);
      c["ops"] = n.ops;  // the batch's indices of its operations
    }
    if (r.two_phase) c["finish"] = n.finish.empty() ? "not sent" : n.finish;
    compounds.push_back(std::move(c));
    time_ms += n.info.elapsed_ms;
    retries += n.info.retries;
  }
  nlohmann::ordered_json j = {{"status", r.status},
                              {"tag", r.merged.tag},
                              {"ops", ops_json(r.merged)},
                              {"nfs_ops", r.merged.nfs_ops},
                              {"nfs_results", r.merged.nfs_results},
                              {"request_bytes", r.merged.request_bytes},
                              {"reply_bytes", r.merged.reply_bytes},
                              {"retries", retries},
                              {"time_ms", time_ms}};
  if (!r.merged.failed_at.empty() && !r.merged.ok()) j["failed_at"] = r.merged.failed_at;
  j["compounds"] = std::move(compounds);
  if (r.two_phase) {
    j["2pc"] = {{"gid", r.gid},
                {"decision", r.decision},
                {"outcome_known", r.outcome_known},
                {"nodes", r.nodes.size()},
                {"prepare_ms", r.prepare_ms},
                {"decide_ms", r.decide_ms},
                {"finish_ms", r.finish_ms}};
  }
  return j;
}

}  // namespace txnfs::nfs::cli
