// Where each operation of a batch goes (pure; no I/O):
//
//  - Referrals: the referrals learnt in this run, as (server, directory) -> (server,
//    path), and the rewriting of a path through them ("/b/y" on 127.31.7.1, where /b is
//    a referral to 127.31.7.2:/b, is "/b/y" on 127.31.7.2).
//  - referral_checks(): the directories a batch's COMPOUND checks for referrals before
//    its first operation (Compound::check_referrals).
//  - partition(): with --cluster, the node of each operation from the cluster map.
//
// Paths are compared by components ("/a//b" is "/a/b"); `fh:` paths are never rewritten
// (a handle belongs to the server that gave it).
#pragma once
#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "compound_bridge/client/nfs_client.h"

namespace txnfs::nfs::cli {

// "/a/b" for "a//b/"; "/" for the root. Throws Error as parse_target does.
std::string canonical_path(const std::string &path);

// The paths of OP that name files on the server (symlink: only its second, the link;
// its first is the link's text).
std::vector<std::string> server_paths(const Operation &op);
// OP with its server paths replaced by PATHS (in the order server_paths gives them).
Operation with_paths(const Operation &op, const std::vector<std::string> &paths);

class Referrals {
 public:
  struct Hop {
    std::string server, dir;         // DIR on SERVER is a referral ...
    std::string to_server, to_path;  // ... to TO_PATH (below the export) on TO_SERVER
  };
  struct Place {
    std::string server, path;
  };

  void add(const Hop &hop);
  const std::vector<Hop> &hops() const { return hops_; }

  // Where PATH, given on SERVER, lives: the learnt referral with the longest directory
  // that is PATH or above it is applied, again on the server it leads to, until none
  // applies. Throws Error after 16 hops (a loop of referrals).
  Place resolve(const std::string &server, const std::string &path) const;

 private:
  std::vector<Hop> hops_;
};

// The path below EXPORT (the export's path in the pseudo file system, as --export) of
// the pseudo-file-system path ROOTPATH of a referral's target. Throws Error when
// ROOTPATH is not EXPORT or below it.
std::string below_export(const std::string &rootpath, const std::string &export_path);

// The directories to check for referrals before OPS run (Compound::check_referrals):
// every directory an operation walks through (its paths' parents), and the directory a
// readdir or setattr acts on; none at or below an entry of SKIP (directories known not
// to exist yet or not to be directories: the walk stops above them) or below a mkdir of
// the batch (a directory the batch makes is no referral); none that another one's walk
// passes through; no `fh:` path. In the order first met.
std::vector<std::string> referral_checks(const std::vector<Operation> &ops,
                                         const std::set<std::string> &skip);

// --cluster: which node each operation goes to.
struct Partition {
  std::vector<std::string> nodes;     // the nodes with operations, in the map's order
  std::vector<size_t> node_of_op;     // index into `nodes`, one per operation
};

// A path's node: that of its first component in TOPS (top -> node); a path directly in
// "/" or below a top the map does not name: the first node of NODES (node -> host).
// Throws Error: no node in NODES; a top whose node has no host; an `fh:` path (a handle
// names no node); a rename or link whose two paths fall on different nodes ("crosses
// nodes", as EXDEV).
Partition partition(const std::vector<Operation> &ops,
                    const std::map<std::string, std::string> &tops,
                    const std::map<std::string, std::string> &nodes);

}  // namespace txnfs::nfs::cli
