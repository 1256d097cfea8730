// Workload 5 (rss): the daemon's memory during one large transaction.
#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <system_error>
#include <thread>
#include <tuple>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/lib/clock.h"
#include "bench/lib/errors.h"
#include "bench/lib/files.h"
#include "bench/lib/interrupt.h"
#include "bench/txnbench/bench.h"
#include "bench/txnbench/helpers.h"
#include "bench/txnbench/procfs.h"
#include "bench/txnbench/undo_log.h"

namespace txnbench {

using namespace bench;

namespace fsys = std::filesystem;

// Workload 5: one transaction of this thread with --rss-ops daemon operations (the
// daemon's own count, txnfs_info.ops): new files (create, 1 KiB write, chmod), small
// overwrites of existing 64 KiB files at changing offsets (each backs up a new block),
// and chmods, round robin. A thread samples the daemon's VmRSS every 100 ms.
void Bench::rss_run() {
  if (opt.daemon <= 0) fail("--daemon-pid is needed for the rss workload");
  std::string wd = make_dir(T, "rss");
  const uint64_t ndirs = 100;
  for (uint64_t d = 0; d < ndirs; ++d) {
    std::string p = fmt::format("{}/d{:03}", wd, d);
    if (mkdir(p.c_str(), 0755) != 0) sys_fail("mkdir", p);
  }
  auto path_new = [&](uint64_t i) { return fmt::format("{}/d{:03}/new{:06}", wd, i % ndirs, i); };
  auto path_old = [&](uint64_t i) { return fmt::format("{}/d{:03}/old{:06}", wd, i % ndirs, i); };
  const uint64_t old_size = 64 << 10;
  fmt::print(stderr, "txnbench: rss: creating {} existing files of 64 KiB (plain, untimed)\n",
             opt.rss_existing);
  for (uint64_t i = 0; i < opt.rss_existing; ++i) {
    check_interrupt();
    std::string p = path_old(i);
    int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) sys_fail("create", p);
    write_all(fd, buf_a.get(), old_size, 0, false, p);
    close(fd);
  }
  quiesce();
  std::atomic<bool> stop{false};
  ProcMem base = read_mem(opt.daemon);
  rss.base_kib = base.rss_kib;
  {
    std::ofstream cr(fmt::format("/proc/{}/clear_refs", opt.daemon));
    cr << "5\n";
    cr.flush();
    rss.hwm_reset = static_cast<bool>(cr);
  }
  std::mutex mu;
  std::thread sampler([&] {
    while (!stop.load()) {
      ProcMem m = read_mem(opt.daemon);
      uint64_t fds = 0;
      std::error_code ec;
      for ([[maybe_unused]] auto &e :
           fsys::directory_iterator(fmt::format("/proc/{}/fd", opt.daemon), ec))
        ++fds;
      {
        std::lock_guard g(mu);
        rss.peak_rss_kib = std::max(rss.peak_rss_kib, m.rss_kib);
        rss.hwm_kib = std::max(rss.hwm_kib, m.hwm_kib);
        rss.fds_peak = std::max(rss.fds_peak, fds);
        rss.threads_peak = std::max(rss.threads_peak, m.threads);
        rss.samples++;
      }
      for (int k = 0; k < 10 && !stop.load(); ++k) usleep(10000);
    }
  });
  auto finish_sampler = [&] {
    stop = true;
    if (sampler.joinable()) sampler.join();
  };
  try {
    fmt::print(stderr, "txnbench: rss: one transaction of {} operations\n", opt.rss_ops);
    double t0 = now_mono();
    txnfs_id_t id = begin_thread_txn();
    uint64_t unit = 0, next_new = 0, writes = 0;
    struct txnfs_info info {};
    for (;;) {
      check_interrupt();
      if (unit % 256 == 0) {
        if (int rc = txnfs_info(opt.mount.c_str(), id, &info); rc < 0)
          fail(fmt::format("txnfs_info: {}", strerror(-rc)));
        if (info.ops >= opt.rss_ops) break;
      }
      int kind = static_cast<int>(unit % 3);
      if (kind == 0 && next_new < opt.rss_new) {  // create + 1 KiB write + chmod
        std::string p = path_new(next_new++);
        int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) sys_fail("create", p);
        write_all(fd, buf_b.get(), 1024, 0, false, p);
        if (fchmod(fd, 0600) != 0) sys_fail("fchmod", p);
        close(fd);
        rss.created++;
      } else if (kind != 2 || opt.rss_existing == 0) {  // 1 KiB pwrite into an existing file
        uint64_t j = writes % std::max<uint64_t>(opt.rss_existing, 1);
        uint64_t blk = (writes / std::max<uint64_t>(opt.rss_existing, 1)) % (old_size / 4096);
        std::string p =
            opt.rss_existing ? path_old(j) : path_new(j % std::max<uint64_t>(next_new, 1));
        int fd = open(p.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0) sys_fail("open", p);
        write_all(fd, buf_b.get(), 1024, blk * 4096, true, p);
        close(fd);
        writes++;
        rss.overwrites++;
      } else {  // chmod of an existing file
        std::string p = path_old(unit / 3 % opt.rss_existing);
        if (chmod(p.c_str(), (unit / 3) % 2 ? 0640 : 0604) != 0) sys_fail("chmod", p);
        rss.setattrs++;
      }
      ++unit;
    }
    double t1 = now_mono();
    rss.ops = info.ops;
    rss.backup = info.backup_bytes;
    std::tie(rss.steps, rss.objects) = count_log(fmt::format("{}/{}", backups, id));
    usleep(250000);  // one more sample or two at the peak
    double t2 = now_mono();
    commit_txn(id);
    rss.commit = now_mono() - t2;
    rss.secs = (t1 - t0) + rss.commit;
    usleep(250000);
  } catch (...) {
    finish_sampler();
    throw;
  }
  finish_sampler();
  rss.after_kib = read_mem(opt.daemon).rss_kib;
  rss.done = true;
  if (csv) {
    *csv << fmt::format("{},{},rss,T,0,0,{},0,{:.9f},{:.9f},,,0,0,{},{},{},{},{},{},{},{}\n",
                        run_id, static_cast<long long>(time(nullptr)),
                        rss.created + rss.overwrites + rss.setattrs, rss.secs, rss.commit, rss.ops,
                        rss.steps, rss.objects, rss.backup, rss.base_kib, rss.peak_rss_kib,
                        rss.hwm_kib, rss.after_kib);
    csv->flush();
  }
  quiesce();
  workdirs.remove(wd);
}

}  // namespace txnbench
