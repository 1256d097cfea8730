// The generated source tree that the tar, rm and abort workloads extract (and
// `txnfs-txnbench gen-tree` writes), and counting a tree on disk.
#pragma once
#include <cstdint>
#include <string>

namespace txnbench {

// What to generate (the options --tree-files, --tree-dirs, --tree-mean-kib, --seed).
struct TreeSpec {
  uint64_t files = 10000;
  uint64_t dirs = 700;
  double mean_kib = 15;
  uint64_t seed = 42;
};

// What a tree holds: its files and directories, the files' bytes; generated trees also
// the empty files, the largest and the median size, the depth.
struct TreeStats {
  uint64_t files = 0, dirs = 0, bytes = 0, empty = 0, max = 0, median = 0, max_depth = 0;
};

// Files and directories below DIR as tar_extract counts an extraction (symbolic links
// are not counted: a package's may point out of the tree), and the files' bytes.
TreeStats count_tree(const std::string &dir);

// A source-like tree: 700 directories of realistic names nested up to 8 deep, files
// spread unevenly over them (a few big directories, many small ones), sizes log-normal
// (median about 6 KiB, a long tail to 2 MiB, 2% empty) rescaled to the requested mean,
// text that looks like C/Python source. Deterministic from the seed.
TreeStats gen_tree(const std::string &out, const TreeSpec &spec);

}  // namespace txnbench
