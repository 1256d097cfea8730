#include "cluster/cluster_map.h"

#include <utility>
#include <vector>

namespace txnfs::cluster {

ClusterMap::ClusterMap(Etcd &etcd, std::string cluster)
    : etcd_(etcd), prefix_("/txnfs/" + cluster + "/") {}

int ClusterMap::load(std::string *why) {
  // Two reads, each linearizable; the tooling writes a node before a top that names it.
  std::vector<std::pair<std::string, std::string>> node_kvs, top_kvs;
  if (int err = etcd_.list(node_key(""), &node_kvs, why)) return err;
  if (int err = etcd_.list(top_key(""), &top_kvs, why)) return err;
  std::map<std::string, std::string> n, t;
  for (auto &[k, v] : node_kvs) n.emplace(k.substr(node_key("").size()), std::move(v));
  for (auto &[k, v] : top_kvs) t.emplace(k.substr(top_key("").size()), std::move(v));
  nodes = std::move(n);
  tops = std::move(t);
  return 0;
}

std::optional<std::string> ClusterMap::host_of_top(const std::string &top) const {
  auto t = tops.find(top);
  if (t == tops.end()) return std::nullopt;
  auto n = nodes.find(t->second);
  if (n == nodes.end()) return std::nullopt;
  return n->second;
}

}  // namespace txnfs::cluster
