// The node's side of presumed abort (resolver.h).
#include "txnfuse/txn/resolver.h"

#include <time.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "store/error.h"
#include "txnfuse/txn/txn.h"

namespace txnfs {

using std::chrono::milliseconds;

int settle(cluster::Decisions &d, const std::string &gid, milliseconds age, milliseconds timeout,
           cluster::Decision *out, std::string *why) {
  if (int err = d.read(gid, out, why)) return err;
  if (*out != cluster::Decision::kNone || age < timeout) return 0;
  return d.decide(gid, cluster::Decision::kAbort, out, why);
}

Resolver::Resolver(const cluster::ClusterConf &conf, TxnManager &txns)
    : conf_(conf), txns_(txns), etcd_(conf.etcd, conf.etcd_timeout), decisions_(etcd_, conf.cluster) {}

Resolver::~Resolver() { stop(); }

void Resolver::start() { thread_ = std::thread([this] { loop(); }); }

void Resolver::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

Resolver::Health Resolver::health() {
  MutexLock g(mu_);
  return health_;
}

void Resolver::check_health() {
  cluster::EtcdStatus st;
  std::string why;
  int err = etcd_.status(&st, &why);
  MutexLock g(mu_);
  health_.checked = true;
  health_.at = std::chrono::steady_clock::now();
  health_.ok = err == 0 && st.leader != 0;
  health_.members = st.members;
  health_.members_ok = st.members_ok;
  health_.leader = st.leader;
  health_.endpoint = st.endpoint;
  health_.error = err ? why : std::string();
}

// The node's counters in the Prometheus text exposition format, written to a temporary
// file and renamed over `metrics` (a reader never sees half of it).
void Resolver::write_metrics() {
  std::string text = txns_.metrics_text();
  Health h = health();
  text += fmt::format(
      "# HELP txnfs_cluster_in_doubt_resolutions_total Prepared transactions this node "
      "resolved itself after their timeout.\n"
      "# TYPE txnfs_cluster_in_doubt_resolutions_total counter\n"
      "txnfs_cluster_in_doubt_resolutions_total {}\n"
      "# HELP txnfs_cluster_etcd_errors_total Failed etcd calls of the resolver.\n"
      "# TYPE txnfs_cluster_etcd_errors_total counter\n"
      "txnfs_cluster_etcd_errors_total {}\n"
      "# HELP txnfs_cluster_etcd_healthy 1 if etcd answered the last check with a leader.\n"
      "# TYPE txnfs_cluster_etcd_healthy gauge\n"
      "txnfs_cluster_etcd_healthy {}\n",
      resolved_.load(), etcd_errors_.load(), h.ok ? 1 : 0);
  std::string tmp = conf_.metrics + ".tmp";
  std::FILE *f = std::fopen(tmp.c_str(), "w");
  if (!f) {
    spdlog::warn("metrics: cannot write {}: {}", tmp, std::strerror(errno));
    return;
  }
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), conf_.metrics.c_str()) != 0)
    spdlog::warn("metrics: cannot write {}: {}", conf_.metrics, std::strerror(errno));
}

void Resolver::loop() {
  for (int round = 0; !stopping_.load(); round++) {
    if (round % 10 == 0) {  // every 5 s
      check_health();
      if (!conf_.metrics.empty()) write_metrics();
    }
    for (int k = 0; k < 5 && !stopping_.load(); k++) std::this_thread::sleep_for(milliseconds(100));
    auto now = std::chrono::system_clock::now();
    for (auto &p : txns_.prepared()) {
      if (stopping_.load()) return;
      auto age = std::chrono::duration_cast<milliseconds>(now - p.since);
      if (age < conf_.prepared_timeout) continue;  // its coordinator may still finish it
      cluster::Decision d;
      std::string why;
      if (settle(decisions_, p.gid, age, conf_.prepared_timeout, &d, &why) != 0) {
        etcd_errors_++;
        spdlog::warn("prepared transaction {} ({}), {} ms old: no decision from etcd ({}); it "
                     "keeps its locks",
                     p.id, p.gid, age.count(), why);
        continue;
      }
      int err = txns_.resolve(0, p.gid, d == cluster::Decision::kCommit);
      if (err == 0) resolved_++;
      if (err == 0 || err == ENOENT)  // (ENOENT: its coordinator resolved it meanwhile)
        spdlog::info("prepared transaction {} ({}), {} ms old: resolved by this node: {}", p.id,
                     p.gid, age.count(), cluster::name(d));
    }
  }
}

namespace {

// Milliseconds since `utc` ("2026-11-29T03:04:05.678Z"); 0 if it does not parse.
milliseconds age_of(const std::string &utc) {
  struct tm tm {};
  int ms = 0;
  if (std::sscanf(utc.c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) < 6)
    return milliseconds(0);
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  auto at = std::chrono::system_clock::from_time_t(timegm(&tm)) + milliseconds(ms);
  auto age = std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now() - at);
  return age.count() > 0 ? age : milliseconds(0);
}

}  // namespace

std::function<bool(const MetaDb::PreparedRow &)> recovery_decider(const cluster::ClusterConf &conf) {
  return [conf](const MetaDb::PreparedRow &p) {
    cluster::Etcd etcd(conf.etcd, conf.etcd_timeout);
    cluster::Decisions decisions(etcd, conf.cluster);
    // The clock starts at the prepared record's time, so a node that was down longer than
    // the timeout decides at once; etcd gets the timeout plus three calls of its own.
    auto start = std::chrono::steady_clock::now();
    milliseconds base = age_of(p.prepared);
    milliseconds patience = conf.prepared_timeout + 3 * conf.etcd_timeout;
    bool told = false;
    for (;;) {
      milliseconds waited =
          std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
      cluster::Decision d;
      std::string why;
      int err = settle(decisions, p.gid, base + waited, conf.prepared_timeout, &d, &why);
      if (err == 0 && d != cluster::Decision::kNone) {
        spdlog::info("recovery: prepared transaction {} ({}): {} (etcd)", p.txid, p.gid,
                     cluster::name(d));
        return d == cluster::Decision::kCommit;
      }
      if (err != 0 && waited >= patience)
        throw Error(fmt::format("prepared transaction {} (global id {}) cannot be resolved: "
                                "etcd does not answer ({})",
                                p.txid, p.gid, why),
                    "the store is unchanged; mount again once etcd has a quorum (txnfs never "
                    "guesses a decision)");
      if (!told) {
        spdlog::info("recovery: prepared transaction {} ({}) waits for its decision{}", p.txid,
                     p.gid, err ? " (etcd: " + why + ")" : std::string());
        told = true;
      }
      std::this_thread::sleep_for(milliseconds(200));
    }
  };
}

}  // namespace txnfs
