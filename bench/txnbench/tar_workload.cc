// Workloads 3 and 4 and rm: extracting the tarball with GNU tar (T and L under
// `txnfs run`), removing the extraction, and (T only) extracting under
// `txnfs run --abort`; tar runs under the stamp wrapper, which timestamps its exit.
#include <fmt/core.h>

#include <cstdlib>
#include <filesystem>

#include <sys/wait.h>

#include "bench/lib/clock.h"
#include "bench/txnbench/bench.h"
#include "bench/txnbench/helpers.h"
#include "bench/txnbench/process.h"
#include "bench/txnbench/procfs.h"
#include "bench/txnbench/stamp.h"

namespace txnbench {

using namespace bench;

namespace fsys = std::filesystem;

void Bench::tar_extract(Cfg c, int rep, int order, Tracer *tr) {
  std::string wd = make_dir(c, fmt::format("r{}.tar", rep));
  std::string stampf = fmt::format("{}/stamp.{}.{}", opt.work, kCfgName[c], rep);
  std::string errf = fmt::format("{}/run.{}.{}.err", opt.work, kCfgName[c], rep);
  std::vector<std::string> argv = in_txn(c);
  for (auto &a : {self, std::string("stamp"), stampf, txn_cfg(c) ? backups : std::string("-"),
                  std::string("--"), std::string("tar"), std::string("-xf"), opt.tarball,
                  std::string("-C"), wd})
    argv.push_back(a);
  quiesce();
  if (tr && c != X) tr->start(fmt::format("tar.{}", kCfgName[c]));
  Sample s{.workload = "tar",
           .cfg = c,
           .rep = rep,
           .order = order,
           .files = tree.files,
           .bytes = tree.bytes};
  double cpu0 = read_cpu(opt.daemon);
  double t0 = now_mono();
  int st = run_wait(argv, "", errf);
  double t_end = now_mono();
  s.daemon_cpu = read_cpu(opt.daemon) - cpu0;
  if (tr && c != X) traces.push_back(tr->stop("tar", c, tree.files));
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail(fmt::format("tar on {} failed ({}):\n{}", kCfgName[c], describe_status(st),
                     last_lines(read_file(errf), 8)));
  const Stamp stamp = read_stamp(stampf);
  double counting = stamp.t_counted - stamp.t_exit;
  s.secs = (t_end - t0) - counting;
  if (txn_cfg(c)) {
    s.commit = t_end - stamp.t_counted;
    s.undo_steps = stamp.steps;
    s.undo_objects = stamp.objects;
    std::string err = read_file(errf);
    auto p = err.find(" committed (");
    if (p != std::string::npos) s.txn_ops = std::strtoull(err.c_str() + p + 12, nullptr, 10);
  }
  s.sync_after = time_syncfs();
  // Check (untimed): every file and directory arrived.
  TreeStats got = count_tree(wd);
  if (got.files != tree.files || got.dirs != tree.dirs)
    fail(fmt::format("tar on {}: {} files and {} directories extracted, want {} and {}",
                     kCfgName[c], got.files, got.dirs, tree.files, tree.dirs));
  record(s);
  if (want.count("rm")) remove_tree(c, rep, order, wd);
  workdirs.remove(wd);
}

// rm -rf of an extraction (T: in a transaction of its own, commit included).
void Bench::remove_tree(Cfg c, int rep, int order, const std::string &wd) {
  std::string errf = fmt::format("{}/rm.{}.{}.err", opt.work, kCfgName[c], rep);
  std::vector<std::string> argv = in_txn(c);
  for (auto &a : {std::string("rm"), std::string("-rf"), wd}) argv.push_back(a);
  quiesce();
  Sample s{.workload = "rm",
           .cfg = c,
           .rep = rep,
           .order = order,
           .files = tree.files,
           .bytes = tree.bytes};
  double cpu0 = read_cpu(opt.daemon);
  double t0 = now_mono();
  int st = run_wait(argv, "", errf);
  s.secs = now_mono() - t0;
  s.daemon_cpu = read_cpu(opt.daemon) - cpu0;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail(fmt::format("rm -rf on {} failed ({}):\n{}", kCfgName[c], describe_status(st),
                     last_lines(read_file(errf), 8)));
  if (fsys::exists(wd)) fail(fmt::format("rm -rf on {}: {} is still there", kCfgName[c], wd));
  s.sync_after = time_syncfs();
  record(s);
}

void Bench::tar_abort(int rep, Tracer *tr) {
  std::string wd = make_dir(T, fmt::format("r{}.abort", rep));
  std::string stampf = fmt::format("{}/stamp.abort.{}", opt.work, rep);
  std::string errf = fmt::format("{}/run.abort.{}.err", opt.work, rep);
  std::vector<std::string> argv = {opt.txnfs, "run",   "--abort",   opt.mount, "--",
                                   self,      "stamp", stampf,      backups,   "--",
                                   "tar",     "-xf",   opt.tarball, "-C",      wd};
  quiesce();
  if (tr) tr->start("abort.T");
  Sample s{.workload = "abort",
           .cfg = T,
           .rep = rep,
           .order = 0,
           .files = tree.files,
           .bytes = tree.bytes};
  double cpu0 = read_cpu(opt.daemon);
  double t0 = now_mono();
  int st = run_wait(argv, "", errf);
  double t_end = now_mono();
  s.daemon_cpu = read_cpu(opt.daemon) - cpu0;
  if (tr) traces.push_back(tr->stop("abort", T, tree.files));
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail(fmt::format("txnfs run --abort tar failed ({}):\n{}", describe_status(st),
                     last_lines(read_file(errf), 8)));
  const Stamp stamp = read_stamp(stampf);
  s.extract = stamp.t_exit - t0;
  s.abort = t_end - stamp.t_counted;
  s.secs = s.extract + s.abort;
  s.undo_steps = stamp.steps;
  s.undo_objects = stamp.objects;
  std::string err = read_file(errf);
  auto p = err.find("): ");
  if (p != std::string::npos) s.txn_ops = std::strtoull(err.c_str() + p + 3, nullptr, 10);
  s.sync_after = time_syncfs();
  // Check (untimed): nothing is left of the extraction.
  uint64_t left = 0;
  for ([[maybe_unused]] auto &e : fsys::directory_iterator(wd)) ++left;
  if (left) fail(fmt::format("after txnfs run --abort, {} has {} entries (want none)", wd, left));
  record(s);
  workdirs.remove(wd);
}

}  // namespace txnbench
