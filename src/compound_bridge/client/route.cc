#include "compound_bridge/client/route.h"

#include <algorithm>

#include "compound_bridge/client/target.h"

namespace txnfs::nfs::cli {
namespace {

constexpr int kMaxHops = 16;

std::string join(const std::vector<std::string> &components, size_t n) {
  std::string path;
  for (size_t i = 0; i < n; i++) path += "/" + components[i];
  return path.empty() ? "/" : path;
}

bool is_handle(const std::string &path) { return path.starts_with("fh:"); }

// Whether the components of PREFIX begin those of PATH (PREFIX is PATH or above it).
bool starts_with(const std::vector<std::string> &path, const std::vector<std::string> &prefix) {
  return prefix.size() <= path.size() && std::equal(prefix.begin(), prefix.end(), path.begin());
}

}  // namespace

std::string canonical_path(const std::string &path) {
  Target t = parse_target(path);
  if (!t.fh.empty()) return path;
  return join(t.components, t.components.size());
}

std::vector<std::string> server_paths(const Operation &op) {
  switch (op.kind) {
    case OpKind::kRename:
    case OpKind::kLink:
      return {op.path, op.path2};
    case OpKind::kSymlink:
      return {op.path2};
    default:
      return {op.path};
  }
}

Operation with_paths(const Operation &op, const std::vector<std::string> &paths) {
  Operation out = op;
  switch (op.kind) {
    case OpKind::kRename:
    case OpKind::kLink:
      out.path = paths.at(0);
      out.path2 = paths.at(1);
      break;
    case OpKind::kSymlink:
      out.path2 = paths.at(0);
      break;
    default:
      out.path = paths.at(0);
      break;
  }
  return out;
}

void Referrals::add(const Hop &hop) {
  Hop h = hop;
  h.dir = canonical_path(h.dir);
  h.to_path = canonical_path(h.to_path);
  hops_.push_back(std::move(h));
}

Referrals::Place Referrals::resolve(const std::string &server, const std::string &path) const {
  Place place{server, path};
  if (is_handle(path)) return place;
  for (int hop = 0;; hop++) {
    std::vector<std::string> components = parse_target(place.path).components;
    const Hop *best = nullptr;
    size_t best_len = 0;
    for (const Hop &h : hops_) {
      if (h.server != place.server) continue;
      std::vector<std::string> dir = parse_target(h.dir).components;
      if (starts_with(components, dir) && (best == nullptr || dir.size() > best_len)) {
        best = &h;
        best_len = dir.size();
      }
    }
    if (best == nullptr) return place;
    if (hop == kMaxHops) {
      throw Error("more than " + std::to_string(kMaxHops) + " referrals on the way to " + path +
                  " (a loop of referrals?)");
    }
    std::vector<std::string> to = parse_target(best->to_path).components;
    to.insert(to.end(), components.begin() + static_cast<std::ptrdiff_t>(best_len),
              components.end());
    place = {best->to_server, join(to, to.size())};
  }
}

std::string below_export(const std::string &rootpath, const std::string &export_path) {
  std::vector<std::string> root = parse_target(rootpath).components;
  std::vector<std::string> exp = parse_target(export_path.empty() ? "/" : export_path).components;
  if (!starts_with(root, exp)) {
    throw Error("the referral's target " + rootpath + " is not below the export " + export_path +
                " (--export)");
  }
  std::vector<std::string> rest(root.begin() + static_cast<std::ptrdiff_t>(exp.size()), root.end());
  return join(rest, rest.size());
}

std::vector<std::string> referral_checks(const std::vector<Operation> &ops,
                                         const std::set<std::string> &skip) {
  std::vector<std::vector<std::string>> stops;  // walks stop above these
  for (const std::string &s : skip) {
    if (!is_handle(s)) stops.push_back(parse_target(s).components);
  }
  for (const Operation &op : ops) {
    if (op.kind == OpKind::kMkdir && !is_handle(op.path)) {
      stops.push_back(parse_target(op.path).components);
    }
  }
  std::vector<std::vector<std::string>> dirs;
  for (const Operation &op : ops) {
    for (const std::string &path : server_paths(op)) {
      if (is_handle(path)) continue;
      std::vector<std::string> c = parse_target(path).components;
      bool itself = op.kind == OpKind::kReaddir || op.kind == OpKind::kSetattr;
      size_t n = itself ? c.size() : (c.empty() ? 0 : c.size() - 1);
      for (const auto &stop : stops) {
        if (!stop.empty() && stop.size() <= n && starts_with(c, stop)) n = stop.size() - 1;
      }
      c.resize(n);
      if (!c.empty() && std::find(dirs.begin(), dirs.end(), c) == dirs.end()) dirs.push_back(c);
    }
  }
  std::vector<std::string> checks;
  for (const auto &d : dirs) {
    bool passed_through = std::any_of(dirs.begin(), dirs.end(), [&](const auto &other) {
      return other.size() > d.size() && starts_with(other, d);
    });
    if (!passed_through) checks.push_back(join(d, d.size()));
  }
  return checks;
}

Partition partition(const std::vector<Operation> &ops,
                    const std::map<std::string, std::string> &tops,
                    const std::map<std::string, std::string> &nodes) {
  if (nodes.empty()) throw Error("the cluster map names no node (no nodes/ key in etcd)");
  auto node_of = [&](const std::string &path) -> std::string {
    if (is_handle(path)) {
      throw Error("--cluster takes no fh: paths (" + path + "): a handle names no node");
    }
    std::vector<std::string> c = parse_target(path).components;
    if (c.size() < 2) return nodes.begin()->first;  // directly in "/"
    auto top = tops.find(c[0]);
    if (top == tops.end()) return nodes.begin()->first;
    if (!nodes.contains(top->second)) {
      throw Error("the cluster map puts /" + c[0] + " on node " + top->second +
                  ", which has no host (no nodes/" + top->second + " key)");
    }
    return top->second;
  };
  std::vector<std::string> node_names;  // per operation
  std::set<std::string> used;
  for (const Operation &op : ops) {
    std::vector<std::string> paths = server_paths(op);
    std::string node = node_of(paths[0]);
    for (size_t i = 1; i < paths.size(); i++) {
      std::string other = node_of(paths[i]);
      if (other != node) {
        throw Error(std::string(op_name(op.kind)) + " " + op.path + " " + op.path2 +
                    " crosses nodes (" + node + " and " + other +
                    "): a rename or link cannot span nodes (EXDEV); nothing was sent");
      }
    }
    node_names.push_back(node);
    used.insert(node);
  }
  Partition p;
  for (const auto &[node, host] : nodes) {
    if (used.contains(node)) p.nodes.push_back(node);
  }
  for (const std::string &node : node_names) {
    p.node_of_op.push_back(static_cast<size_t>(
        std::find(p.nodes.begin(), p.nodes.end(), node) - p.nodes.begin()));
  }
  return p;
}

}  // namespace txnfs::nfs::cli
