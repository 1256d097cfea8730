// Bench: the frame of every sample (work directories, equal starting states, the
// transaction of the bench thread, recording), the tarball, and the order of the run.
#include "bench/txnbench/bench.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <tuple>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/lib/clock.h"
#include "bench/lib/errors.h"
#include "bench/lib/interrupt.h"
#include "bench/lib/stats.h"
#include "bench/txnbench/helpers.h"
#include "bench/txnbench/process.h"
#include "bench/txnbench/procfs.h"
#include "bench/txnbench/undo_log.h"

namespace txnbench {

using namespace bench;

namespace fsys = std::filesystem;

std::string Bench::make_dir(Cfg c, const std::string &tag) {
  return workdirs.make(fmt::format("{}/txnbench.{}.{}.{}", dir_of(c), getpid(), kCfgName[c], tag));
}

void Bench::cleanup() {
  if (open_txn) {
    int rc = txnfs_abort(opt.mount.c_str(), *open_txn);
    if (rc < 0)
      fmt::print(stderr, "txnbench: warning: abort of transaction {}: {}\n", *open_txn,
                 strerror(-rc));
    open_txn.reset();
  }
  workdirs.remove_left();
}

void Bench::quiesce() {
  sync();
  double t0 = now_mono();
  bool warned = false;
  for (;;) {
    check_interrupt();
    bool empty = true;
    if (DIR *d = opendir(backups.c_str())) {
      while (dirent *e = readdir(d))
        if (e->d_name[0] != '.') empty = false;
      closedir(d);
    }
    bool idle = true;
    if (empty) {
      std::vector<char> js(TXNFS_STATUS_JSON_MAX);
      if (txnfs_status_json(opt.mount.c_str(), js.data(), js.size()) >= 0)
        idle = std::strstr(js.data(), "\"transactions\":[]") != nullptr;
    }
    if (empty && idle) break;
    if (!warned && now_mono() - t0 > 30) {
      fmt::print(stderr,
                 "txnbench: warning: still waiting for the daemon to discard undo logs ({})\n",
                 backups);
      warned = true;
    }
    if (now_mono() - t0 > 300) fail("the daemon did not discard its undo logs within 300 s");
    usleep(10000);
  }
  sync();
}

double Bench::time_syncfs() {
  double t0 = now_mono();
  if (syncfs(xfs_fd) != 0) sys_fail("syncfs", opt.xfs_dir);
  return now_mono() - t0;
}

void Bench::record(Sample s) {
  if (opt.daemon > 0) s.daemon_rss_kib = read_mem(opt.daemon).rss_kib;
  if (opt.verbose)
    fmt::print(stderr,
               "txnbench: {} {} rep={} secs={:.4f} commit={:.4f} extract={:.4f} abort={:.4f} "
               "sync_after={:.4f} "
               "daemon_cpu={:.2f} txn_ops={} undo_steps={} daemon_rss={}k\n",
               s.workload, kCfgName[s.cfg], s.rep, s.secs, s.commit, s.extract, s.abort,
               s.sync_after, s.daemon_cpu, s.txn_ops, s.undo_steps, s.daemon_rss_kib);
  if (csv) {
    auto opt_num = [](double v) { return v < 0 ? std::string() : fmt::format("{:.9f}", v); };
    *csv << fmt::format("{},{},{},{},{},{},{},{},{:.9f},{},{},{},{:.9f},{:.3f},{},{},{},{},,,,{}\n",
                        run_id, static_cast<long long>(time(nullptr)), s.workload, kCfgName[s.cfg],
                        s.rep, s.order, s.files, s.bytes, s.secs, opt_num(s.commit),
                        opt_num(s.extract), opt_num(s.abort), s.sync_after, s.daemon_cpu, s.txn_ops,
                        s.undo_steps, s.undo_objects, s.backup_bytes, s.daemon_rss_kib);
    csv->flush();
  }
  samples.push_back(std::move(s));
}

txnfs_id_t Bench::begin_thread_txn() {
  txnfs_id_t id = 0;
  int rc = txnfs_begin(opt.mount.c_str(), TXNFS_BIND_THREAD, 0, &id);
  if (rc < 0) fail(fmt::format("txnfs_begin({}): {}", opt.mount, strerror(-rc)));
  open_txn = id;
  return id;
}

void Bench::inspect_txn(txnfs_id_t id, Sample &s) {
  struct txnfs_info info {};
  if (txnfs_info(opt.mount.c_str(), id, &info) == 0) {
    s.txn_ops = info.ops;
    s.backup_bytes = info.backup_bytes;
  }
  std::tie(s.undo_steps, s.undo_objects) = count_log(fmt::format("{}/{}", backups, id));
}

void Bench::commit_txn(txnfs_id_t id, bool lazy) {
  int rc = txnfs_commit2(opt.mount.c_str(), id, lazy ? TXNFS_COMMIT_LAZY : TXNFS_COMMIT_DURABLE);
  open_txn.reset();
  if (rc < 0) fail(fmt::format("txnfs_commit({}): {}", id, strerror(-rc)));
}

void Bench::prepare_tarball() {
  std::string src = opt.work + "/tree-src";
  opt.tarball = opt.work + "/tree.tar";
  if (!opt.tree_from.empty()) {
    src = opt.tree_from;
    tree = count_tree(src);
    fmt::print(stderr, "txnbench: the tree of {} ({} files, {} directories, {} bytes)\n", src,
               tree.files, tree.dirs, tree.bytes);
  } else {
    fmt::print(
        stderr,
        "txnbench: generating the source tree ({} files, {} directories, mean {} KiB, seed {})\n",
        opt.tree.files, opt.tree.dirs, opt.tree.mean_kib, opt.tree.seed);
    tree = gen_tree(src, opt.tree);
  }
  int st = run_wait({"tar", "-cf", opt.tarball, "--sort=name", "--owner=0", "--group=0",
                     "--numeric-owner", "--mtime=@1700000000", "-C", src, "."},
                    "", opt.work + "/tar-create.err");
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail(fmt::format("tar -cf failed ({}): {}", describe_status(st),
                     read_file(opt.work + "/tar-create.err")));
  if (opt.tree_from.empty()) fsys::remove_all(src);
  struct stat sb {};
  if (stat(opt.tarball.c_str(), &sb) != 0) sys_fail("stat", opt.tarball);
  tar_bytes = static_cast<uint64_t>(sb.st_size);
  // Warm: read it once so that every configuration reads it from the page cache.
  int fd = open(opt.tarball.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    std::vector<char> b(1 << 20);
    while (read(fd, b.data(), b.size()) > 0) {
    }
    close(fd);
  }
}

void Bench::run() {
  std::unique_ptr<Tracer> tracer;
  if (!opt.trace.empty()) {
    tracer = std::make_unique<Tracer>();
    tracer->kind = opt.trace;
    tracer->daemon = opt.daemon;
    tracer->dir = opt.work;
    tracer->kdev = mount_kdev;
  }
  Tracer *tr = tracer.get();
  if (opt.daemon > 0) {
    ProcMem m = read_mem(opt.daemon);
    start_rss_kib = m.rss_kib;
    start_threads = m.threads;
  }
  bool has_t = std::find(cfgs.begin(), cfgs.end(), T) != cfgs.end();
  if (want.count("rm")) want.insert("tar");  // rm removes what tar extracted
  if (want.count("tar") || want.count("abort")) prepare_tarball();
  for (int rep = 0; rep < opt.reps; ++rep) {
    std::vector<Cfg> order;
    for (size_t i : rep_order(cfgs.size(), rep)) order.push_back(cfgs[i]);
    std::string order_s;
    for (Cfg c : order) order_s += kCfgName[c];
    if (want.count("write") || want.count("overwrite"))
      for (uint64_t size : sizes)
        for (size_t k = 0; k < order.size(); ++k) {
          fmt::print(stderr, "txnbench: rep {}/{} ({}) {} x {} files on {}\n", rep + 1, opt.reps,
                     order_s, opt.files, human_bytes(size), kCfgName[order[k]]);
          files_pair(order[k], rep, static_cast<int>(k), size, tr);
        }
    if (want.count("tar"))
      for (size_t k = 0; k < order.size(); ++k) {
        fmt::print(stderr, "txnbench: rep {}/{} ({}) tar -xf on {}\n", rep + 1, opt.reps, order_s,
                   kCfgName[order[k]]);
        tar_extract(order[k], rep, static_cast<int>(k), tr);
      }
    if (want.count("abort") && has_t) {
      fmt::print(stderr, "txnbench: rep {}/{} txnfs run --abort tar -xf on T\n", rep + 1, opt.reps);
      tar_abort(rep, tr);
    }
  }
  if (want.count("rss") && has_t && opt.rss_ops > 0) rss_run();
}

}  // namespace txnbench
