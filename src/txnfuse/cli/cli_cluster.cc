// txnfs resolve (cli_cluster.h).
#include "txnfuse/cli/cli_cluster.h"

#include <cerrno>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "cluster/cluster_conf.h"
#include "cluster/decisions.h"
#include "cluster/etcd.h"
#include "store/error.h"
#include "txnfs/txnfs.h"

namespace txnfs::cli {

int resolve_command(const std::string &mountpoint, const std::string &gid,
                    const std::string &cluster_conf, bool abort_if_undecided) {
  std::string error;
  std::optional<cluster::ClusterConf> conf = cluster::load_cluster_conf(cluster_conf, &error);
  if (!conf) throw Error(error);
  if (!cluster::valid_gid(gid)) throw Error("`" + gid + "` is not a global id (1 to 64 of [A-Za-z0-9._-])");
  cluster::Etcd etcd(conf->etcd, conf->etcd_timeout);
  cluster::Decisions decisions(etcd, conf->cluster);
  cluster::Decision d = cluster::Decision::kNone;
  std::string why;
  if (decisions.read(gid, &d, &why) != 0)
    throw Error("cannot read the decision for " + gid + " from etcd: " + why,
                "nothing was changed; try again once etcd has a quorum");
  if (d == cluster::Decision::kNone && abort_if_undecided &&
      decisions.decide(gid, cluster::Decision::kAbort, &d, &why) != 0)
    throw Error("cannot write the decision for " + gid + " to etcd: " + why,
                "nothing was changed; try again once etcd has a quorum");
  if (d == cluster::Decision::kNone) {
    fmt::print(stderr,
               "txnfs: {} has no decision in etcd yet (its coordinator may still decide); "
               "nothing was changed (--abort-if-undecided writes ABORT first)\n",
               gid);
    return 3;
  }
  bool commit = d == cluster::Decision::kCommit;
  int rc = txnfs_resolve(mountpoint.c_str(), gid.c_str(), commit);
  if (rc == -ENOENT) {
    fmt::print("{}: decision {}; no prepared transaction {} here (resolved already)\n",
               mountpoint, cluster::name(d), gid);
    return 0;
  }
  if (rc != 0)
    throw Error(-rc, fmt::format("{}: {} of prepared transaction {}", mountpoint,
                                 commit ? "commit" : "rollback", gid));
  fmt::print("{}: prepared transaction {} {}\n", mountpoint, gid,
             commit ? "committed" : "rolled back");
  return 0;
}

}  // namespace txnfs::cli
