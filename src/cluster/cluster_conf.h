// A node's or client's cluster configuration: `key = value` lines, `#` starts a comment,
// blank lines are ignored. Keys:
//
//   cluster = demo            required: etcd keys live under /txnfs/<cluster>/
//                             ([A-Za-z0-9._-], at most 64 characters)
//   node = n1                 this node's name (the daemon's); absent for a pure client
//   etcd = http://h:p,...     required: etcd's client URLs, comma-separated
//   etcd_timeout_ms = 2000    one etcd call, all endpoints tried within it (1..600000)
//   prepared_timeout_ms = 10000  a prepared transaction older than this is resolved by
//                             its node (1..86400000)
//   metrics = /path           optional: Prometheus textfile, rewritten every 5 s
//
// Unknown keys, repeated keys and malformed values are errors.
//
// A global transaction id (gid) is 1..64 characters of [A-Za-z0-9._-]; new_gid() makes
// `<hostname or "c">-<unix ms>-<16 random hex digits>`.
#pragma once
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace txnfs::cluster {

struct ClusterConf {
  std::string cluster, node;
  std::vector<std::string> etcd;  // endpoints, "http://host:port" (no trailing '/')
  std::chrono::milliseconds etcd_timeout{2000}, prepared_timeout{10000};
  std::string metrics;
};

// Parses the text of a configuration file. On error: nullopt, *error = "line N: what".
std::optional<ClusterConf> parse_cluster_conf(std::string_view text, std::string *error);

// Reads and parses the file. On error: nullopt and *error, one line naming the file (and
// the line).
std::optional<ClusterConf> load_cluster_conf(const std::string &path, std::string *error);

// Whether `name` is 1..64 characters of [A-Za-z0-9._-]: a gid, a cluster or node name.
bool valid_gid(std::string_view gid);
bool valid_name(std::string_view name);

// A new gid, unique with overwhelming probability (64 random bits per millisecond).
std::string new_gid();

}  // namespace txnfs::cluster
