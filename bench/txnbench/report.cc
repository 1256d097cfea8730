// The report of a run: the main table (medians, ratios against the targets), the
// extraction and removal against raw XFS, the abort, the context table, the daemon's
// memory, and with --trace the tracers' per-file summaries.
#include <fmt/core.h>

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

#include "bench/lib/output.h"
#include "bench/lib/stats.h"
#include "bench/txnbench/bench.h"

namespace txnbench {

using namespace bench;

void Bench::print_traces() const {
  if (traces.empty()) return;
  const char *what = opt.trace == "strace" ? "daemon syscalls (strace -c -f -p)"
                     : opt.trace == "fuse"
                         ? "FUSE requests to this mount (perf tracepoint fuse:fuse_request_send)"
                         : "daemon CPU (perf record -e cpu-clock --call-graph dwarf -p)";
  fmt::print("\n== --trace {}: {} during each sample, daemon pid {}; timings above are distorted\n",
             opt.trace, what, opt.daemon);
  std::vector<std::string> order;
  for (auto &t : traces)
    if (std::find(order.begin(), order.end(), t.workload) == order.end())
      order.push_back(t.workload);
  for (auto &wl : order) {
    const TraceResult *tp = nullptr, *tt = nullptr;
    for (auto &t : traces)
      if (t.workload == wl) (t.cfg == T ? tt : tp) = &t;
    if (opt.trace == "perf") {
      for (auto *t : {tp, tt})
        if (t)
          fmt::print("\n-- {} on {} ({} files) --\n{}", wl, kCfgName[t->cfg], t->files, t->text);
      continue;
    }
    // per file, P next to T, the 18 biggest rows
    std::set<std::string> names;
    for (auto *t : {tp, tt})
      if (t)
        for (auto &[k, v] : t->counts) names.insert(k);
    auto per = [](const TraceResult *t, const std::string &k) {
      if (!t || !t->files) return 0.0;
      auto it = t->counts.find(k);
      return it == t->counts.end() ? 0.0 : it->second / static_cast<double>(t->files);
    };
    std::vector<std::string> rows(names.begin(), names.end());
    std::sort(rows.begin(), rows.end(), [&](auto &a, auto &b) {
      return std::max(per(tp, a), per(tt, a)) > std::max(per(tp, b), per(tt, b));
    });
    uint64_t files = tt ? tt->files : tp ? tp->files : 0;
    fmt::print("\n-- {} ({} files): {} per file --\n", wl, files,
               opt.trace == "strace" ? "syscalls" : "requests");
    fmt::print("  {:<22} {:>9} {:>9} {:>9}\n", "", "P", "T", "T-P");
    for (size_t i = 0; i < rows.size() && i < 18; ++i) {
      double a = per(tp, rows[i]), b = per(tt, rows[i]);
      if (a < 0.005 && b < 0.005) continue;
      fmt::print("  {:<22} {:>9.2f} {:>9.2f} {:>+9.2f}\n", rows[i], a, b, b - a);
    }
    double ta = tp && tp->files ? tp->total / static_cast<double>(tp->files) : 0;
    double tb = tt && tt->files ? tt->total / static_cast<double>(tt->files) : 0;
    fmt::print("  {:<22} {:>9.2f} {:>9.2f} {:>+9.2f}\n", "total", ta, tb, tb - ta);
  }
}

void Bench::report() const {
  auto med = [&](const std::string &wl, Cfg c, double Sample::*field) {
    std::vector<double> v;
    for (auto &s : samples)
      if (s.workload == wl && s.cfg == c && s.*field >= 0) v.push_back(s.*field);
    return v.empty() ? -1.0 : median(v);
  };
  auto med_u = [&](const std::string &wl, Cfg c, uint64_t Sample::*field) {
    std::vector<double> v;
    for (auto &s : samples)
      if (s.workload == wl && s.cfg == c) v.push_back(static_cast<double>(s.*field));
    return v.empty() ? 0.0 : median(v);
  };
  auto worst_spread = [&](const std::string &wl) {
    double worst = 0;
    for (Cfg c : cfgs) {
      std::vector<double> v;
      for (auto &s : samples)
        if (s.workload == wl && s.cfg == c) v.push_back(s.secs);
      worst = std::max(worst, spread(v));
    }
    return worst;
  };
  auto has = [&](Cfg c) { return std::find(cfgs.begin(), cfgs.end(), c) != cfgs.end(); };
  auto ratio = [](double a, double b) {
    return a > 0 && b > 0 ? fmt::format("{:.2f}x", a / b) : std::string("-");
  };
  auto secs = [](double v) { return v >= 0 ? fmt::format("{:.3f}", v) : std::string("-"); };

  std::vector<std::string> wls;
  for (auto &s : samples)
    if (s.workload != "abort" && std::find(wls.begin(), wls.end(), s.workload) == wls.end())
      wls.push_back(s.workload);
  // write-* first, then overwrite-*, then tar
  std::stable_sort(wls.begin(), wls.end(), [](const std::string &a, const std::string &b) {
    auto rank = [](const std::string &w) {
      return w.rfind("write", 0) == 0 ? 0 : w.rfind("overwrite", 0) == 0 ? 1 : 2;
    };
    return rank(a) < rank(b);
  });

  fmt::print("\n");
  fmt::print(
      "txnfs-txnbench: median of {} repetitions; configurations alternate order each repetition\n",
      opt.reps);
  for (Cfg c : cfgs) fmt::print("  {}  ({})\n", kCfgTitle[c], c == X ? opt.xfs_dir : opt.mount);
  fmt::print(
      "  scale: write/overwrite: {} files of each of {} bytes per sample; tar: {} files ({} bytes, "
      "mean {:.1f} KiB,\n"
      "         median {:.1f} KiB, max {:.0f} KiB, {} empty) in {} directories (depth <= {}), "
      "tarball {} MiB,\n"
      "         seed {}; rss: {} operations in one transaction\n",
      opt.files, opt.sizes, tree.files, tree.bytes,
      tree.files ? tree.bytes / 1024.0 / tree.files : 0.0, tree.median / 1024.0, tree.max / 1024.0,
      tree.empty, tree.dirs, tree.max_depth, tar_bytes >> 20, opt.tree.seed, opt.rss_ops);
  fmt::print(
      "  caches: WARM. Nothing is dropped: the tarball is read from the page cache, overwrite "
      "follows write\n"
      "          on the same files; before every sample an untimed sync() runs and the bench waits "
      "until the\n"
      "          daemon has no open transaction and no undo log left to discard (equal starting "
      "states).\n");
  fmt::print(
      "  measured: wall clock of the workload only. T includes txnfs_begin and the commit (syncfs "
      "of the\n"
      "          store + commit record) - durability that X and P do not pay; 'sync after' shows "
      "what a\n"
      "          syncfs right after the sample costs each side (untimed context). tar = spawn of\n"
      "          `tar -xf` (T: `txnfs run MOUNT -- tar -xf`) until it exits; T's commit = tar's "
      "exit\n"
      "          (a timestamp the wrapper `txnfs-txnbench stamp` takes) until `txnfs run` "
      "exits.\n\n");

  // main table
  std::string h = fmt::format("{:<14} {:>6}", "workload", "files");
  for (Cfg c : cfgs) h += fmt::format(" {:>8}", std::string(kCfgName[c]) + " s");
  if (has(T)) h += fmt::format(" {:>9}", "T commit");
  if (has(P) && has(T)) h += fmt::format(" {:>6} {:>6} {:>6}", "T/P", "target", "");
  if (has(P) && has(L)) h += fmt::format(" {:>6} {:>7} {:>6}", "L/P", "target", "");
  if (has(X) && has(T)) h += fmt::format(" {:>8}", "T/X");
  if (has(X) && has(P)) h += fmt::format(" {:>8}", "P/X");
  h += fmt::format(" {:>7}", "spread");
  print_table_header(h);
  bool all_ok = true;
  for (auto &wl : wls) {
    uint64_t files = 0;
    for (auto &s : samples)
      if (s.workload == wl) files = s.files;
    std::string line = fmt::format("{:<14} {:>6}", wl, files);
    for (Cfg c : cfgs) line += fmt::format(" {:>8}", secs(med(wl, c, &Sample::secs)));
    if (has(T)) line += fmt::format(" {:>9}", secs(med(wl, T, &Sample::commit)));
    if (has(P) && has(T)) {
      double r = med(wl, T, &Sample::secs) / med(wl, P, &Sample::secs);
      bool ok = r <= 1.3;
      all_ok = all_ok && ok;
      line += fmt::format(" {:>6} {:>6} {:>6}",
                          ratio(med(wl, T, &Sample::secs), med(wl, P, &Sample::secs)), "<=1.3x",
                          ok ? "ok" : "MISSED");
    }
    if (has(P) && has(L)) {
      double r = med(wl, L, &Sample::secs) / med(wl, P, &Sample::secs);
      bool is_write = wl.rfind("write", 0) == 0;  // the T-lazy target covers the write rows
      line += fmt::format(" {:>6} {:>7} {:>6}",
                          ratio(med(wl, L, &Sample::secs), med(wl, P, &Sample::secs)),
                          is_write ? "<=1.15x" : "",
                          !is_write   ? ""
                          : r <= 1.15 ? "ok"
                                      : "MISSED");
    }
    if (has(X) && has(T))
      line += fmt::format(" {:>8}", ratio(med(wl, T, &Sample::secs), med(wl, X, &Sample::secs)));
    if (has(X) && has(P))
      line += fmt::format(" {:>8}", ratio(med(wl, P, &Sample::secs), med(wl, X, &Sample::secs)));
    line += fmt::format(" {:>6.0f}%", worst_spread(wl) * 100);
    fmt::print("{}\n", line);
  }

  // extraction and removal against raw XFS (the targets are for a real package's tree)
  if (has(X) && (has(P) || has(T))) {
    bool any = false;
    for (auto [wl, tp, tt] : {std::tuple{"tar", 2.5, 3.0}, std::tuple{"rm", 2.0, 3.0}}) {
      double x = med(wl, X, &Sample::secs);
      if (x <= 0) continue;
      if (!any)
        fmt::print("\nagainst raw XFS{}: plain (P) and in one transaction (T, commit included)\n",
                   opt.tree_from.empty()
                       ? " (a generated tree; the targets are for a package's files)"
                       : " (" + opt.tree_from + ")");
      any = true;
      for (auto [c, target] : {std::pair{P, tp}, std::pair{T, tt}}) {
        if (!has(c)) continue;
        double r = med(wl, c, &Sample::secs) / x;
        fmt::print("  {:<4} {}/X {:>7}   target <= {:.1f}x   {}\n", wl, kCfgName[c],
                   ratio(med(wl, c, &Sample::secs), x), target, r <= target ? "ok" : "MISSED");
      }
    }
  }

  // abort
  bool abort_ok = true;
  bool have_abort =
      std::any_of(samples.begin(), samples.end(), [](auto &s) { return s.workload == "abort"; });
  if (have_abort) {
    double ex = med("abort", T, &Sample::extract), ab = med("abort", T, &Sample::abort);
    abort_ok = ex > 0 && ab / ex <= 0.5;
    fmt::print(
        "\nabort of the extraction (T only): `txnfs run --abort MOUNT -- stamp -- tar -xf ...`\n");
    fmt::print("  extraction  (txnfs run starts -> tar exits)          {:>8} s\n", secs(ex));
    fmt::print(
        "  abort       (tar exits -> txnfs run --abort exits)   {:>8} s   (undo of {:.0f} steps, "
        "{:.0f} operations)\n",
        secs(ab), med_u("abort", T, &Sample::undo_steps), med_u("abort", T, &Sample::txn_ops));
    fmt::print("  abort/extract = {}   target <= 0.5x   {}\n", ratio(ab, ex),
               abort_ok ? "ok" : "MISSED");
    if (med("tar", T, &Sample::secs) > 0)
      fmt::print("  (the committed extraction on T: {} s, of which commit {} s)\n",
                 secs(med("tar", T, &Sample::secs)), secs(med("tar", T, &Sample::commit)));
    fmt::print(
        "  the abort window also holds the exit of the wrapper and tar's parent, txnfs_info, and "
        "the\n"
        "  release of locks and kernel-cache invalidation that txnfs_abort waits for.\n");
  }

  // context table
  fmt::print("\ncontext (medians): durability and daemon work per sample\n");
  std::string ch = fmt::format("{:<14}", "workload");
  for (Cfg c : cfgs) ch += fmt::format(" {:>9}", std::string(kCfgName[c]) + "+sync s");
  if (has(P) && has(T)) ch += fmt::format(" {:>10}", "T/(P+sync)");
  if (has(P)) ch += fmt::format(" {:>8}", "P cpu s");
  if (has(T)) ch += fmt::format(" {:>8} {:>8} {:>8} {:>9}", "T cpu s", "T ops", "undo", "backup");
  if (opt.daemon > 0) ch += fmt::format(" {:>9}", "RSS after");
  print_table_header(ch);
  std::vector<std::string> all = wls;
  if (have_abort) all.push_back("abort");
  for (auto &wl : all) {
    std::string line = fmt::format("{:<14}", wl);
    for (Cfg c : cfgs) {
      double a = med(wl, c, &Sample::secs);
      double b = med(wl, c, &Sample::sync_after);
      line += fmt::format(" {:>9}", a >= 0 ? secs(a + b) : std::string("-"));
    }
    if (has(P) && has(T)) {
      double ps = med(wl, P, &Sample::secs), pb = med(wl, P, &Sample::sync_after);
      line += fmt::format(" {:>10}",
                          ps > 0 ? ratio(med(wl, T, &Sample::secs), ps + pb) : std::string("-"));
    }
    if (has(P)) {
      double v = med(wl, P, &Sample::daemon_cpu);
      line += fmt::format(
          " {:>8}", med(wl, P, &Sample::secs) >= 0 ? fmt::format("{:.2f}", v) : std::string("-"));
    }
    if (has(T))
      line += fmt::format(" {:>8.2f} {:>8.0f} {:>8.0f} {:>8.0f}M", med(wl, T, &Sample::daemon_cpu),
                          med_u(wl, T, &Sample::txn_ops), med_u(wl, T, &Sample::undo_steps),
                          med_u(wl, T, &Sample::backup_bytes) / 1048576.0);
    if (opt.daemon > 0) {
      uint64_t mx = 0;
      for (auto &s : samples)
        if (s.workload == wl) mx = std::max(mx, s.daemon_rss_kib);
      line += fmt::format(" {:>8.0f}M", mx / 1024.0);
    }
    fmt::print("{}\n", line);
  }
  fmt::print(
      "  X+sync/P+sync/T+sync = the sample plus an untimed syncfs of the image right after it;\n"
      "  cpu = daemon user+system CPU during the sample; T ops = the daemon's operation count of "
      "the\n"
      "  transaction; undo = undo steps in its log (records in STORE/.txnfs/backups/<id>/) before "
      "the\n"
      "  commit/abort; backup = bytes the log backed up (cloned); RSS after = the daemon's largest "
      "VmRSS\n"
      "  right after a sample of this workload (any configuration; the daemon was at {:.0f} MiB "
      "when the run began).\n",
      start_rss_kib / 1024.0);

  bool rss_ok = true;
  if (rss.done) {
    rss_ok = rss.hwm_kib <= 100 * 1024 && rss.peak_rss_kib <= 100 * 1024;
    fmt::print("\ndaemon memory during one {}-operation transaction (T, thread-bound):\n", rss.ops);
    fmt::print(
        "  work: {} new files (create + 1 KiB write + chmod), {} 1 KiB overwrites of {} existing "
        "64 KiB files\n"
        "        (a new 4 KiB block each time), {} chmods; {} undo steps, {} log objects, {:.1f} "
        "MiB backed up\n",
        rss.created, rss.overwrites, opt.rss_existing, rss.setattrs, rss.steps, rss.objects,
        static_cast<double>(rss.backup) / 1048576.0);
    fmt::print("  time: {:.2f} s in all ({:.1f} us per operation), commit {:.2f} s\n", rss.secs,
               rss.ops ? rss.secs / static_cast<double>(rss.ops) * 1e6 : 0.0, rss.commit);
    fmt::print(
        "  RSS before {:.1f} MiB; peak VmRSS sampled every 100 ms {:.1f} MiB ({} samples); VmHWM "
        "{} {:.1f} MiB;\n"
        "  after commit {:.1f} MiB; open fds peak {}, threads peak {} (at the start of the run: "
        "{:.1f} MiB,\n"
        "  {} threads).   target <= 100 MB   {}\n",
        rss.base_kib / 1024.0, rss.peak_rss_kib / 1024.0, rss.samples,
        rss.hwm_reset ? "(reset at begin)" : "(NOT reset: since daemon start)",
        rss.hwm_kib / 1024.0, rss.after_kib / 1024.0, rss.fds_peak, rss.threads_peak,
        start_rss_kib / 1024.0, start_threads, rss_ok ? "ok" : "MISSED");
  }

  fmt::print(
      "\ntargets: T/P <= 1.3x on every workload: {}; abort/extract <= 0.5x: {}; daemon RSS <= 100 "
      "MB: {}\n",
      all_ok ? "met" : "NOT met", have_abort ? (abort_ok ? "met" : "NOT met") : "not measured",
      rss.done ? (rss_ok ? "met" : "NOT met") : "not measured");
  print_traces();
}

}  // namespace txnbench
