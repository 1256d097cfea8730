// txnfs-txnbench: what a transaction costs, side by side in one run.
//
// Three configurations on one XFS image (driven by bench/txn-vs-plain):
//   X  a plain XFS directory on the image (a sibling of the store),
//   P  the txnfs mount, no transaction (plain requests),
//   T  the txnfs mount, the whole workload inside one transaction, commit included.
// Workloads (each repetition: every configuration in turn, the order reversed on odd
// repetitions; fresh directory per sample; median over the repetitions):
//   write-S      create N new files of S bytes (open O_CREAT|O_EXCL, one write, close)
//   overwrite-S  those files again in place (open O_WRONLY, pwrite all, close)
//   tar          extract a generated source-like tree with GNU tar
//                (T: `txnfs run MOUNT -- tar -xf ...`, process-bound, commit included)
//   abort        T only: `txnfs run --abort MOUNT -- tar -xf ...`; extraction and abort
//                timed separately with a timestamp taken when tar exits
//   rss          daemon RSS during one 100,000-operation transaction (sampled, 100 ms)
// This machine is shared and noisy: the ratios measured side by side are the result.
//
// Subcommands:
//   run       the benchmark (see --help)
//   gen-tree  write the generated source tree to a directory (to look at it)
//   stamp     internal: `stamp OUT COUNT_DIR -- CMD...` runs CMD, writes the
//             CLOCK_MONOTONIC time of its exit to OUT, exits with its status.
//
// The files of this folder: bench/txnbench/README.md.

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/lib/buffer.h"
#include "bench/lib/errors.h"
#include "bench/lib/files.h"
#include "bench/lib/interrupt.h"
#include "bench/lib/output.h"
#include "bench/txnbench/bench.h"
#include "bench/txnbench/helpers.h"
#include "bench/txnbench/options.h"
#include "bench/txnbench/stamp.h"
#include "bench/txnbench/tree.h"

namespace txnbench {

using namespace bench;

namespace fsys = std::filesystem;

namespace {

int run_main(Options opt) {
  Bench b(opt);
  // sizes, workloads, configurations
  {
    std::stringstream ss(opt.sizes);
    for (std::string s; std::getline(ss, s, ',');)
      if (!s.empty()) b.sizes.push_back(parse_size(s));
    std::stringstream ws(opt.workloads);
    static const std::set<std::string> known = {"write", "overwrite", "tar", "rm", "abort", "rss"};
    for (std::string s; std::getline(ws, s, ',');) {
      if (s.empty()) continue;
      if (!known.count(s)) fail("unknown workload '" + s + "' (write,overwrite,tar,rm,abort,rss)");
      b.want.insert(s);
    }
    std::stringstream cs(opt.configs);
    for (std::string s; std::getline(cs, s, ',');) {
      if (s == "X") b.cfgs.push_back(X);
      else if (s == "P") b.cfgs.push_back(P);
      else if (s == "T") b.cfgs.push_back(T);
      else if (s == "L") b.cfgs.push_back(L);
      else if (!s.empty()) fail("unknown configuration '" + s + "' (X,P,T,L)");
    }
  }
  for (auto *d : {&opt.xfs_dir, &opt.mount, &opt.store, &opt.work}) {
    struct stat st {};
    if (stat(d->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) fail(*d + " is not a directory");
  }
  if (fs_type_name(opt.mount) != "fuse") fail(opt.mount + " is not a FUSE mount");
  {
    struct stat st {};
    if (stat(opt.mount.c_str(), &st) != 0) sys_fail("stat", opt.mount);
    b.mount_kdev = kernel_dev(st.st_dev);
  }
  {
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) sys_fail("readlink", "/proc/self/exe");
    buf[n] = 0;
    b.self = buf;
    if (b.opt.txnfs.empty())
      b.opt.txnfs = (fsys::path(b.self).parent_path().parent_path() / "src/txnfuse/txnfs").string();
  }
  b.backups = opt.store + "/.txnfs/backups";
  if (access(b.backups.c_str(), R_OK) != 0)
    sys_fail("cannot read the undo-log directory", b.backups);
  b.xfs_fd = open(opt.xfs_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (b.xfs_fd < 0) sys_fail("open", opt.xfs_dir);
  uint64_t maxsz = 1024 * 64;
  for (auto s : b.sizes) maxsz = std::max(maxsz, s);
  const uint64_t buf_len = (maxsz + 4095) / 4096 * 4096;
  b.buf_a = aligned_buffer(buf_len);
  b.buf_b = aligned_buffer(buf_len);
  Pattern(0x9E3779B97F4A7C15ull).fill(b.buf_a.get(), buf_len);
  Pattern(0xD1B54A32D192ED03ull).fill(b.buf_b.get(), buf_len);
  b.run_id = make_run_id();
  if (!opt.csv.empty())
    b.csv =
        open_csv(opt.csv,
                 "run_id,unix_time,workload,config,rep,order,files,bytes,seconds,commit_seconds,"
                 "extract_seconds,abort_seconds,sync_after_seconds,daemon_cpu_seconds,txn_ops,"
                 "undo_steps,undo_objects,backup_bytes,rss_base_kib,rss_peak_kib,rss_hwm_kib,"
                 "daemon_rss_after_kib");
  int rc = exit_status_of("txnfs-txnbench", "interrupted, cleaning up", [&] {
    b.run();
    b.report();
    return 0;
  });
  b.cleanup();
  close(b.xfs_fd);
  return rc;
}

}  // namespace

}  // namespace txnbench

using namespace txnbench;

int main(int argc, char **argv) {
  if (argc >= 2 && std::string(argv[1]) == "stamp") return stamp_main(argc, argv);

  Options opt;
  CLI::App app{
      "txnfs-txnbench: a transaction vs. no transaction vs. raw XFS, side by side (see "
      "bench/README.md)"};
  app.require_subcommand(1);
  auto *run = app.add_subcommand("run", "run the benchmark (bench/txn-vs-plain sets it up)");
  run->add_option("--xfs", opt.xfs_dir, "X: a directory on the XFS image, outside the store")
      ->required();
  run->add_option("--mount", opt.mount, "P and T: the txnfs mount point")->required();
  run->add_option("--store", opt.store,
                  "the store behind the mount (its .txnfs/backups is watched)")
      ->required();
  run->add_option("--work", opt.work,
                  "scratch directory outside the mount (tarball, timestamps, traces)")
      ->required();
  run->add_option("--daemon-pid", opt.daemon, "PID of the txnfs daemon (CPU and RSS, --trace)");
  run->add_option("--txnfs", opt.txnfs,
                  "the txnfs CLI (default: ../src/txnfuse/txnfs next to this program)");
  run->add_option("--reps", opt.reps, "repetitions (median is reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  run->add_option("--files", opt.files, "files per write/overwrite sample")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  run->add_option("--sizes", opt.sizes, "file sizes for write/overwrite")->capture_default_str();
  run->add_option("--workloads", opt.workloads,
                  "subset of write,overwrite,tar,rm,abort,rss (rm: rm -rf of each extraction)")
      ->capture_default_str();
  run->add_option("--configs", opt.configs, "subset of X,P,T,L (L: T committed lazily)")
      ->capture_default_str();
  run->add_option("--tree-files", opt.tree.files, "files in the generated tree")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  run->add_option("--tree-dirs", opt.tree.dirs, "directories in the generated tree")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  run->add_option("--tree-mean-kib", opt.tree.mean_kib, "mean file size of the tree, KiB")
      ->capture_default_str();
  run->add_option("--seed", opt.tree.seed, "seed of the generated tree")->capture_default_str();
  run->add_option("--tree-from", opt.tree_from,
                  "tar and rm: extract this directory's tree (e.g. a package's files) instead of a "
                  "generated one");
  run->add_option("--rss-ops", opt.rss_ops, "operations in the RSS transaction (0: skip)")
      ->capture_default_str();
  run->add_option("--rss-new", opt.rss_new, "at most this many new files in it")
      ->capture_default_str();
  run->add_option("--rss-existing", opt.rss_existing,
                  "existing 64 KiB files it overwrites and chmods")
      ->capture_default_str();
  run->add_option("--csv", opt.csv, "append raw per-sample rows to FILE");
  run->add_option("--trace", opt.trace,
                  "during every P and T sample: count the daemon's syscalls (strace), the "
                  "FUSE requests by opcode (fuse), or sample the daemon's CPU (perf); "
                  "prints per-file summaries, distorts timings")
      ->check(CLI::IsMember({"strace", "fuse", "perf"}));
  run->add_flag("-v,--verbose", opt.verbose, "print every sample to stderr");

  TreeSpec gspec;
  std::string gout;
  auto *gen =
      app.add_subcommand("gen-tree", "write the generated source tree into a new directory");
  gen->add_option("OUT", gout, "directory to create")->required();
  gen->add_option("--tree-files", gspec.files, "files")->capture_default_str();
  gen->add_option("--tree-dirs", gspec.dirs, "directories")->capture_default_str();
  gen->add_option("--tree-mean-kib", gspec.mean_kib, "mean file size, KiB")->capture_default_str();
  gen->add_option("--seed", gspec.seed, "seed")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  install_interrupt_handlers();

  return exit_status_of("txnfs-txnbench", "interrupted", [&] {
    if (*gen) {
      if (fsys::exists(gout)) fail(gout + " exists");
      TreeStats st = gen_tree(gout, gspec);
      fmt::print(
          "{}: {} files ({} bytes, mean {:.1f} KiB, median {:.1f} KiB, max {:.0f} KiB, {} empty), "
          "{} directories, "
          "depth <= {}\n",
          gout, st.files, st.bytes, st.bytes / 1024.0 / std::max<uint64_t>(st.files, 1),
          st.median / 1024.0, st.max / 1024.0, st.empty, st.dirs, st.max_depth);
      return 0;
    }
    return run_main(opt);
  });
}
