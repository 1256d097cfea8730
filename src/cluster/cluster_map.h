// The cluster's namespace map: which node holds which top-level directory, and each
// node's NFS host. Keys /txnfs/<cluster>/nodes/<node> = host and
// /txnfs/<cluster>/map/<top> = node; the cluster tooling writes them, everyone reads.
//
// load() replaces `nodes` and `tops` only when it succeeds; a failed load leaves the last
// map. The map may name a node with no nodes/ entry (while the tooling changes it):
// host_of_top() then has no answer.
#pragma once
#include <map>
#include <optional>
#include <string>

#include "cluster/etcd.h"

namespace txnfs::cluster {

class ClusterMap {
 public:
  ClusterMap(Etcd &etcd, std::string cluster);

  int load(std::string *why);  // nodes and map from etcd

  std::map<std::string, std::string> nodes;  // node -> host
  std::map<std::string, std::string> tops;   // top -> node

  // The host of the node that holds /<top>; nullopt when the map has no such top or
  // names a node without a host.
  std::optional<std::string> host_of_top(const std::string &top) const;

  std::string node_key(const std::string &node) const { return prefix_ + "nodes/" + node; }
  std::string top_key(const std::string &top) const { return prefix_ + "map/" + top; }

 private:
  Etcd &etcd_;
  const std::string prefix_;  // "/txnfs/<cluster>/"
};

}  // namespace txnfs::cluster
