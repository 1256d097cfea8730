// The configurations txnfs-txnbench compares (X, P, T, L) and the options of
// `txnfs-txnbench run`.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>

#include "bench/txnbench/tree.h"

namespace txnbench {

enum Cfg { X = 0, P = 1, T = 2, L = 3 };
inline const char *kCfgName[] = {"X", "P", "T", "L"};
inline const char *kCfgTitle[] = {"X = raw XFS directory on the image",
                                  "P = txnfs mount, no transaction",
                                  "T = txnfs mount, one transaction (commit timed)",
                                  "L = T-lazy: as T, committed lazily (TXNFS_COMMIT_LAZY)"};
inline bool txn_cfg(Cfg c) { return c == T || c == L; }

// What `txnfs-txnbench run` was asked (main() fills it from the command line).
struct Options {
  std::string xfs_dir, mount, store, work, txnfs, tarball, csv, trace;
  std::string tree_from;  // tar this directory (a package's files) instead of a generated tree
  pid_t daemon = 0;
  int reps = 3;
  uint64_t files = 1000;
  std::string sizes = "1K,64K,1M";
  std::string workloads = "write,overwrite,tar,abort,rss";
  std::string configs = "X,P,T,L";
  TreeSpec tree;
  uint64_t rss_ops = 100000, rss_new = 10000, rss_existing = 5000;
  bool verbose = false;
};

}  // namespace txnbench
