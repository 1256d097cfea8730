// Workloads 1 and 2 (write-S, overwrite-S): N new files of S bytes, then the same
// files overwritten in place; T and L in one transaction of the bench thread.
#include <fmt/core.h>

#include <algorithm>
#include <cstring>

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

namespace txnbench {

using namespace bench;

void Bench::files_pair(Cfg c, int rep, int order, uint64_t size, Tracer *tr) {
  const uint64_t n = opt.files;
  const std::string tag = fmt::format("r{}.{}", rep, human_bytes(size));
  std::string wd = make_dir(c, tag);
  int dfd = open(wd.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) sys_fail("open", wd);
  std::vector<std::string> names;
  for (uint64_t i = 0; i < n; ++i) names.push_back(fmt::format("f{:05}", i));

  for (int pass = 0; pass < 2; ++pass) {
    const bool overwrite = pass == 1;
    const std::string wl =
        fmt::format("{}-{}", overwrite ? "overwrite" : "write", human_bytes(size));
    const bool timed = want.count(overwrite ? "overwrite" : "write") > 0;
    const char *data = overwrite ? buf_b.get() : buf_a.get();
    quiesce();
    if (tr && timed && c != X) tr->start(fmt::format("{}.{}", wl, kCfgName[c]));
    Sample s{.workload = wl, .cfg = c, .rep = rep, .order = order, .files = n, .bytes = n * size};
    double cpu0 = read_cpu(opt.daemon);
    double t0 = now_mono();
    txnfs_id_t id = txn_cfg(c) ? begin_thread_txn() : 0;
    for (uint64_t i = 0; i < n; ++i) {
      check_interrupt();
      int fd = overwrite
                   ? openat(dfd, names[i].c_str(), O_WRONLY | O_CLOEXEC)
                   : openat(dfd, names[i].c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd < 0) sys_fail(overwrite ? "open" : "create", wd + "/" + names[i]);
      write_all(fd, data, size, 0, overwrite, wd + "/" + names[i]);
      if (close(fd) != 0) sys_fail("close", wd + "/" + names[i]);
    }
    double t1 = now_mono();
    if (txn_cfg(c)) {
      inspect_txn(id, s);  // untimed
      double t2 = now_mono();
      commit_txn(id, c == L);
      double t3 = now_mono();
      s.commit = t3 - t2;
      s.secs = (t1 - t0) + s.commit;
    } else {
      s.secs = t1 - t0;
    }
    s.daemon_cpu = read_cpu(opt.daemon) - cpu0;
    if (tr && timed && c != X) traces.push_back(tr->stop(wl, c, n));
    s.sync_after = time_syncfs();
    // Check (untimed): sizes and the first bytes of the first and the last file.
    for (uint64_t i : {uint64_t(0), n - 1}) {
      struct stat st {};
      if (fstatat(dfd, names[i].c_str(), &st, 0) != 0) sys_fail("stat", wd + "/" + names[i]);
      char head[64];
      int fd = openat(dfd, names[i].c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) sys_fail("open", wd + "/" + names[i]);
      ssize_t r = pread(fd, head, sizeof head, 0);
      close(fd);
      size_t want_n = std::min<size_t>(sizeof head, size);
      if (static_cast<uint64_t>(st.st_size) != size || r != static_cast<ssize_t>(want_n) ||
          std::memcmp(head, data, want_n) != 0)
        fail(fmt::format("{}: {} has size {} or content not as written", wl, wd + "/" + names[i],
                         st.st_size));
    }
    if (timed) record(s);
    if (!want.count("overwrite")) break;
  }
  close(dfd);
  workdirs.remove(wd);
}

}  // namespace txnbench
