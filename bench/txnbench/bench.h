// The benchmark: one run of `txnfs-txnbench run`, its samples and what it needs between
// them (equal starting states, the transaction of the bench thread). Its methods are
// spread by job: bench.cc (the frame and the order of the run), files_workload.cc,
// tar_workload.cc, rss_workload.cc (the workloads), report.cc (the tables).
#pragma once
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bench/lib/buffer.h"
#include "bench/lib/workdirs.h"
#include "bench/txnbench/options.h"
#include "bench/txnbench/tracer.h"
#include "bench/txnbench/tree.h"
#include "txnfs/txnfs.h"

namespace txnbench {

// One timed sample: one workload on one configuration in one repetition.
struct Sample {
  std::string workload;
  Cfg cfg;
  int rep, order;
  uint64_t files = 0, bytes = 0;
  double secs = 0;        // the result: whole workload, T: begin..commit returned
  double commit = -1;     // T: the commit (txnfs_commit, or tar exit -> txnfs run exit)
  double extract = -1;    // abort: txnfs run start -> tar exit
  double abort = -1;      // abort: tar exit -> txnfs run exit
  double sync_after = 0;  // untimed context: syncfs of the image right after
  double daemon_cpu = 0;  // daemon user+sys CPU during the sample
  uint64_t txn_ops = 0, undo_steps = 0, undo_objects = 0, backup_bytes = 0;
  uint64_t daemon_rss_kib = 0;  // daemon VmRSS right after the sample
};

struct Bench {
  Options opt;
  std::string self;     // this executable (the stamp wrapper)
  std::string backups;  // STORE/.txnfs/backups
  int xfs_fd = -1;      // for syncfs of the image
  std::vector<uint64_t> sizes;
  std::set<std::string> want;
  std::vector<Cfg> cfgs;
  bench::AlignedBuffer buf_a,
      buf_b;  // what write and overwrite write (rss: overwrites and new files)
  std::vector<Sample> samples;
  std::unique_ptr<std::ofstream> csv;
  std::string run_id;
  TreeStats tree;
  uint64_t tar_bytes = 0;
  uint64_t start_rss_kib = 0, start_threads = 0;
  bench::WorkDirs workdirs{"txnbench"};  // cleanup() removes what is left of them
  std::optional<txnfs_id_t> open_txn;
  std::vector<TraceResult> traces;
  uint64_t mount_kdev = 0;  // the mount's st_dev as the kernel prints it (FUSE connection id)
  // rss
  struct Rss {
    bool done = false;
    uint64_t ops = 0, created = 0, overwrites = 0, setattrs = 0, steps = 0, objects = 0, backup = 0;
    uint64_t base_kib = 0, peak_rss_kib = 0, hwm_kib = 0, after_kib = 0, samples = 0, fds_peak = 0;
    uint64_t threads_peak = 0;
    bool hwm_reset = false;
    double secs = 0, commit = 0;
  } rss;

  explicit Bench(Options o) : opt(std::move(o)) {}

  std::string dir_of(Cfg c) const { return c == X ? opt.xfs_dir : opt.mount; }

  // A fresh work directory for one sample on C: <dir of C>/txnbench.<pid>.<C>.<tag>.
  std::string make_dir(Cfg c, const std::string &tag);

  // Aborts the transaction left open by a failed sample; removes the work directories.
  void cleanup();

  // Equal starting states: everything written so far is on disk (untimed sync), the
  // daemon has no open transaction and no undo log left to discard in the background.
  void quiesce();

  // Seconds a syncfs of the XFS image takes (untimed context of a sample).
  double time_syncfs();

  // Keeps S (with the daemon's RSS now), prints it with -v, appends it to --csv.
  void record(Sample s);

  // A transaction of this thread; its undo log is counted outside the timing.
  txnfs_id_t begin_thread_txn();

  // Fills S's operation count, backed-up bytes and undo steps of transaction ID.
  void inspect_txn(txnfs_id_t id, Sample &s);

  // Commits ID (durably, or lazily: TXNFS_COMMIT_LAZY); fail()s when it fails.
  void commit_txn(txnfs_id_t id, bool lazy = false);

  // ---- workloads 1 and 2: new files, then the same files overwritten ----
  void files_pair(Cfg c, int rep, int order, uint64_t size, Tracer *tr);
  // ---- workloads 3 and 4: tar ----
  void tar_extract(Cfg c, int rep, int order, Tracer *tr);
  void remove_tree(Cfg c, int rep, int order, const std::string &wd);
  // The command prefix that runs a command as configuration C does: T and L in one
  // transaction of its own (`txnfs run [--lazy] MOUNT --`), X and P as it is.
  std::vector<std::string> in_txn(Cfg c) const {
    if (c == T) return {opt.txnfs, "run", opt.mount, "--"};
    if (c == L) return {opt.txnfs, "run", "--lazy", opt.mount, "--"};
    return {};
  }
  void tar_abort(int rep, Tracer *tr);
  // ---- workload 5 ----
  void rss_run();

  void prepare_tarball();
  void run();
  void report() const;
  void print_traces() const;
};

}  // namespace txnbench
