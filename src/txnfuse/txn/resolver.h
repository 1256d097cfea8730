// Resolver: how a node settles its prepared transactions with its cluster
// (docs/cluster.md). The decision of a global transaction lives in etcd (cluster/
// decisions.h); a node never guesses one.
//
//   settle()   the decision for one prepared transaction: the one in etcd if there is
//              one; else, once it has been prepared for `prepared_timeout`, ABORT written
//              by compare-and-swap (presumed abort: its coordinator is gone or slow, and
//              if it wrote COMMIT first, that is what comes back); else none yet.
//   Resolver   a thread of the daemon that, twice a second, settles every prepared
//              transaction older than the timeout and resolves it (TxnManager::resolve).
//              So a dead coordinator holds a prepared transaction's locks for at most
//              the timeout, plus etcd's answer, as long as etcd has a quorum; without
//              one they wait, and the log says why.
//   It also checks etcd's health every 5 s (Health, for `txnfs status`) and, when the
//   configuration names a `metrics` file, rewrites it then in the Prometheus text
//   format (node_exporter's textfile collector reads such files).
//   recovery_decider()  the same for recovery at mount (RecoveryOptions::decide): it
//              waits, as the thread would, until every prepared transaction is decided,
//              and fails the mount with the reason (store unchanged) if etcd cannot
//              answer within the timeout plus three of its calls.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "cluster/cluster_conf.h"
#include "cluster/decisions.h"
#include "cluster/etcd.h"
#include "store/metadb.h"
#include "sync/mutex.h"

namespace txnfs {

class TxnManager;

// 0 and *out (kNone: not decided yet), or the errno of etcd (and *why).
int settle(cluster::Decisions &d, const std::string &gid, std::chrono::milliseconds age,
           std::chrono::milliseconds timeout, cluster::Decision *out, std::string *why);

class Resolver {
 public:
  Resolver(const cluster::ClusterConf &conf, TxnManager &txns);
  ~Resolver();
  void start();
  void stop();
  cluster::Etcd &etcd() { return etcd_; }
  const cluster::ClusterConf &conf() const { return conf_; }
  uint64_t resolved() const { return resolved_.load(); }   // by this node, after the timeout
  uint64_t etcd_errors() const { return etcd_errors_.load(); }
  struct Health {
    bool checked = false, ok = false;
    int members = 0, members_ok = 0;
    uint64_t leader = 0;
    std::string endpoint, error;
    std::chrono::steady_clock::time_point at;
  };
  Health health() EXCLUDES(mu_);

 private:
  void loop();
  void check_health() EXCLUDES(mu_);
  void write_metrics();
  const cluster::ClusterConf conf_;
  TxnManager &txns_;
  cluster::Etcd etcd_;
  cluster::Decisions decisions_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> resolved_{0}, etcd_errors_{0};
  Mutex mu_{LockRank::kResolver};  // a leaf
  Health health_ GUARDED_BY(mu_);
  std::thread thread_;
};

// RecoveryOptions::decide for a node with this configuration: true to commit.
std::function<bool(const MetaDb::PreparedRow &)> recovery_decider(const cluster::ClusterConf &conf);

}  // namespace txnfs
