// txnfs-fsbench: side-by-side file-system micro-benchmark.
//
// Runs the same steps on two or more directories (e.g. a plain XFS directory and a
// txnfs mount on the same XFS image), alternating the directories in every
// repetition, and prints the median time of each step per directory and its ratio
// against the first directory (the baseline).  This machine is shared and noisy:
// absolute times mean little, the ratios measured side by side in one run are the
// result.
//
// Steps (each repetition uses a fresh subdirectory, removed afterwards):
//   a  create+write(4 KiB)+close N files
//   b  fstatat each file
//   c  list the directory: opendir/readdir all entries + fstatat each (as `ls -l`)
//   c' list the directory: opendir/readdir all entries, d_type only (as `find -type f`)
//   d  open+read+close each file
//   e  unlink each file
//   f  sequential write of one big file with 1 MiB writes, then fsync, then close
//   g  sequential read of that file with 1 MiB reads
// Caches are warm: nothing is dropped between steps, on every directory alike.

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <optional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/lib/buffer.h"
#include "bench/lib/clock.h"
#include "bench/lib/errors.h"
#include "bench/lib/files.h"
#include "bench/lib/interrupt.h"
#include "bench/lib/output.h"
#include "bench/lib/stats.h"
#include "bench/lib/workdirs.h"

namespace {

using namespace bench;

struct Dir {
  std::string label;
  std::string path;
  std::string fstype;
  uint64_t kdev = 0;  // st_dev in the kernel's encoding (= FUSE connection id in tracepoints)
};

enum class Kind { meta, io };

struct StepInfo {
  std::string id;     // short id used in CSV and --steps
  std::string title;  // shown in the table
  Kind kind;
};

const std::vector<StepInfo> kSteps = {
    {"a", "a  create+write+close 4K", Kind::meta}, {"b", "b  stat", Kind::meta},
    {"c", "c  readdir + stat each", Kind::meta},   {"c'", "c' readdir (d_type only)", Kind::meta},
    {"d", "d  open+read+close 4K", Kind::meta},    {"e", "e  unlink", Kind::meta},
    {"f", "f  seq write 1M + fsync", Kind::io},    {"g", "g  seq read 1M", Kind::io},
};

struct Sample {
  std::string step;
  size_t dir;
  int rep;
  int order;  // position of this directory within the repetition (0 = first)
  double secs;
  uint64_t ops;
  uint64_t bytes;
};

struct Options {
  std::vector<std::string> dir_specs;
  int reps = 3;
  uint64_t files = 10000;
  uint64_t big_mib = 1024;
  std::string csv;
  std::string steps = "a,b,c,c',d,e,f,g";
  bool full_paths = false;
  bool no_sync = false;
  bool verbose = false;
  std::string target_label;
  double target_meta = 0;
  double target_io = 0;
  std::vector<std::string> target_specs;       // --target STEP=RATIO
  std::map<std::string, double> step_targets;  // parsed: over --target-meta/--target-io
};

constexpr size_t kSmall = 4096;
constexpr size_t kIoSize = 1 << 20;

// A directory fd, or AT_FDCWD with a path prefix (for --full-paths).
struct Base {
  int fd = AT_FDCWD;
  std::string prefix;  // "" or "<dir>/"
  ~Base() {
    if (fd >= 0) close(fd);
  }
  std::string name(const std::string &n) const { return prefix + n; }
};

std::unique_ptr<Base> open_base(const std::string &dir, bool full_paths) {
  auto b = std::make_unique<Base>();
  if (full_paths) {
    b->prefix = dir + "/";
  } else {
    b->fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (b->fd < 0) sys_fail("open", dir);
  }
  return b;
}

struct Bench {
  Options opt;
  std::vector<Dir> dirs;
  WorkDirs &workdirs;  // main() removes what is left of them, also on failure or interrupt
  std::vector<std::string> names;                    // file names f000000...
  std::set<std::string> want;                        // steps to run
  AlignedBuffer small_buf = aligned_buffer(kSmall);  // what step a writes and d checks
  AlignedBuffer big_buf = aligned_buffer(kIoSize);   // what step f writes, g reads into
  std::vector<Sample> samples;
  std::unique_ptr<std::ofstream> csv;
  std::string run_id = make_run_id();

  Bench(Options o, std::vector<Dir> d, WorkDirs &w)
      : opt(std::move(o)), dirs(std::move(d)), workdirs(w) {
    for (uint64_t i = 0; i < opt.files; ++i) names.push_back(fmt::format("f{:07}", i));
    Pattern pattern(0x9E3779B97F4A7C15ull);  // one stream: big_buf goes on where small_buf ends
    pattern.fill(small_buf.get(), kSmall);
    pattern.fill(big_buf.get(), kIoSize);
  }

  void record(const std::string &step, size_t di, int rep, int order, double t0, double t1,
              uint64_t ops, uint64_t bytes) {
    samples.push_back({step, di, rep, order, t1 - t0, ops, bytes});
    if (opt.verbose)
      fmt::print(stderr,
                 "fsbench: step={} dir={} rep={} pid={} ops={} dev={} start={:.6f} end={:.6f} "
                 "secs={:.6f}\n",
                 step, dirs[di].label, rep, getpid(), ops, dirs[di].kdev, t0, t1, t1 - t0);
    if (csv) {
      *csv << fmt::format("{},{},{},{},{},{},{},{:.9f},{},{},{},{}\n", run_id,
                          static_cast<long long>(time(nullptr)), dirs[di].label, dirs[di].path, rep,
                          order, step, t1 - t0, ops, bytes, opt.files, opt.big_mib);
      csv->flush();
    }
  }

  // A fresh work directory in D for one group of steps: D/fsbench.<pid>.<tag>.
  std::string make_workdir(const Dir &d, const std::string &tag) {
    return workdirs.make(fmt::format("{}/fsbench.{}.{}", d.path, getpid(), tag));
  }

  void maybe_sync() {
    if (!opt.no_sync) sync();
  }

  // --- metadata group: a, b, c, c', d, e on a fresh subdirectory ------------------
  void meta_group(size_t di, int rep, int order) {
    const Dir &d = dirs[di];
    std::string wd = make_workdir(d, fmt::format("r{}.meta", rep));
    auto base = open_base(wd, opt.full_paths);
    maybe_sync();
    const uint64_t n = names.size();

    // a: create+write+close
    {
      double t0 = now_mono();
      for (uint64_t i = 0; i < n; ++i) {
        check_interrupt();
        std::string nm = base->name(names[i]);
        int fd = openat(base->fd, nm.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) sys_fail("create", wd + "/" + names[i]);
        ssize_t w = write(fd, small_buf.get(), kSmall);
        if (w != static_cast<ssize_t>(kSmall)) {
          if (w >= 0) errno = EIO;
          sys_fail("write", wd + "/" + names[i]);
        }
        if (close(fd) != 0) sys_fail("close", wd + "/" + names[i]);
      }
      double t1 = now_mono();
      if (want.count("a")) record("a", di, rep, order, t0, t1, n, n * kSmall);
    }
    // b: stat
    if (want.count("b")) {
      double t0 = now_mono();
      for (uint64_t i = 0; i < n; ++i) {
        check_interrupt();
        struct stat st {};
        std::string nm = base->name(names[i]);
        if (fstatat(base->fd, nm.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
          sys_fail("stat", wd + "/" + names[i]);
        if (static_cast<size_t>(st.st_size) != kSmall) {
          errno = EIO;
          sys_fail("stat: unexpected size of", wd + "/" + names[i]);
        }
      }
      double t1 = now_mono();
      record("b", di, rep, order, t0, t1, n, 0);
    }
    // c: readdir + stat each entry; c': readdir, d_type only
    for (const char *sid : {"c", "c'"}) {
      if (!want.count(sid)) continue;
      const bool with_stat = std::string(sid) == "c";
      double t0 = now_mono();
      DIR *dp = opendir(wd.c_str());
      if (!dp) sys_fail("opendir", wd);
      uint64_t entries = 0, regular = 0, unknown = 0;
      int dfd = dirfd(dp);
      errno = 0;
      while (struct dirent *de = readdir(dp)) {
        check_interrupt();
        if (is_dot_or_dotdot(de->d_name)) continue;
        ++entries;
        if (with_stat) {
          struct stat st {};
          if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            sys_fail("stat", wd + "/" + de->d_name);
          if (S_ISREG(st.st_mode)) ++regular;
        } else {
          if (de->d_type == DT_REG) ++regular;
          if (de->d_type == DT_UNKNOWN) ++unknown;
        }
        errno = 0;
      }
      if (errno != 0) sys_fail("readdir", wd);
      closedir(dp);
      double t1 = now_mono();
      if (entries != n || regular != n) {
        errno = EIO;
        sys_fail(fmt::format("readdir: {} entries, {} regular (d_type unknown: {}), want {}, in",
                             entries, regular, unknown, n),
                 wd);
      }
      record(sid, di, rep, order, t0, t1, n, 0);
    }
    // d: open+read+close
    if (want.count("d")) {
      double t0 = now_mono();
      for (uint64_t i = 0; i < n; ++i) {
        check_interrupt();
        std::string nm = base->name(names[i]);
        int fd = openat(base->fd, nm.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) sys_fail("open", wd + "/" + names[i]);
        // Read up to EOF as a program reading a whole file would: 4 KiB then 0.
        char tmp[kSmall * 2];
        size_t got = 0;
        for (;;) {
          ssize_t r = read(fd, tmp + got, sizeof tmp - got);
          if (r < 0) sys_fail("read", wd + "/" + names[i]);
          if (r == 0) break;
          got += static_cast<size_t>(r);
          if (got == sizeof tmp) break;
        }
        if (got != kSmall || std::memcmp(tmp, small_buf.get(), kSmall) != 0) {
          errno = EIO;
          sys_fail(fmt::format("read: wrong content ({} bytes) in", got), wd + "/" + names[i]);
        }
        if (close(fd) != 0) sys_fail("close", wd + "/" + names[i]);
      }
      double t1 = now_mono();
      record("d", di, rep, order, t0, t1, n, n * kSmall);
    }
    // e: unlink
    {
      double t0 = now_mono();
      for (uint64_t i = 0; i < n; ++i) {
        check_interrupt();
        std::string nm = base->name(names[i]);
        if (unlinkat(base->fd, nm.c_str(), 0) != 0) sys_fail("unlink", wd + "/" + names[i]);
      }
      double t1 = now_mono();
      if (want.count("e")) record("e", di, rep, order, t0, t1, n, 0);
    }
    base.reset();
    workdirs.remove(wd);
    maybe_sync();
  }

  // --- big-file group: f, g on a fresh subdirectory -----------------------------
  void io_group(size_t di, int rep, int order) {
    const Dir &d = dirs[di];
    std::string wd = make_workdir(d, fmt::format("r{}.big", rep));
    std::string path = wd + "/big";
    const uint64_t total = opt.big_mib * kIoSize;
    maybe_sync();
    {
      double t0 = now_mono();
      int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) sys_fail("create", path);
      uint64_t done = 0;
      while (done < total) {
        check_interrupt();
        size_t chunk = static_cast<size_t>(std::min<uint64_t>(kIoSize, total - done));
        write_all(fd, big_buf.get(), chunk, 0, false, path);
        done += chunk;
      }
      if (fsync(fd) != 0) sys_fail("fsync", path);
      if (close(fd) != 0) sys_fail("close", path);
      double t1 = now_mono();
      if (want.count("f")) record("f", di, rep, order, t0, t1, opt.big_mib, total);
    }
    if (want.count("g")) {
      double t0 = now_mono();
      int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) sys_fail("open", path);
      uint64_t done = 0;
      for (;;) {
        check_interrupt();
        ssize_t r = read(fd, big_buf.get(), kIoSize);
        if (r < 0) {
          if (errno == EINTR) continue;
          sys_fail("read", path);
        }
        if (r == 0) break;
        done += static_cast<uint64_t>(r);
      }
      if (close(fd) != 0) sys_fail("close", path);
      double t1 = now_mono();
      if (done != total) {
        errno = EIO;
        sys_fail(fmt::format("read {} of {} bytes from", done, total), path);
      }
      record("g", di, rep, order, t0, t1, opt.big_mib, total);
    }
    workdirs.remove(wd);
    maybe_sync();
  }

  void run() {
    bool any_meta = false, any_io = false;
    for (auto &s : kSteps)
      if (want.count(s.id)) (s.kind == Kind::meta ? any_meta : any_io) = true;
    const size_t nd = dirs.size();
    for (int rep = 0; rep < opt.reps; ++rep) {
      const std::vector<size_t> order = rep_order(nd, rep);
      if (any_meta)
        for (size_t k = 0; k < nd; ++k) {
          fmt::print(stderr, "fsbench: rep {}/{} metadata steps on {}\n", rep + 1, opt.reps,
                     dirs[order[k]].label);
          meta_group(order[k], rep, static_cast<int>(k));
        }
      if (any_io)
        for (size_t k = 0; k < nd; ++k) {
          fmt::print(stderr, "fsbench: rep {}/{} big-file steps on {}\n", rep + 1, opt.reps,
                     dirs[order[k]].label);
          io_group(order[k], rep, static_cast<int>(k));
        }
    }
  }

  void report() const {
    const size_t nd = dirs.size();
    std::optional<size_t> target_dir;
    if (!opt.target_label.empty()) {
      for (size_t i = 0; i < nd; ++i)
        if (dirs[i].label == opt.target_label) target_dir = i;
    } else if (nd >= 2) {
      target_dir = 1;
    }
    const bool targets =
        (opt.target_meta > 0 || opt.target_io > 0) && target_dir && *target_dir != 0;

    fmt::print("\n");
    fmt::print(
        "txnfs-fsbench: median of {} repetitions; directories alternate order each repetition\n",
        opt.reps);
    fmt::print(
        "  files: {} x 4 KiB per repetition ({}); big file: {} MiB, 1 MiB write()/read() calls\n",
        opt.files, opt.full_paths ? "full paths" : "*at() calls relative to an open directory fd",
        opt.big_mib);
    for (size_t i = 0; i < nd; ++i)
      fmt::print("  {}{:<10} = {} ({})\n", i == 0 ? "baseline " : "         ", dirs[i].label,
                 dirs[i].path, dirs[i].fstype);
    fmt::print(
        "  caches: WARM. Nothing is dropped before any step, on every directory alike: stat, "
        "readdir\n"
        "          and read steps see whatever the kernel (and the daemon) still cache after the\n"
        "          step before; the read steps read data written moments earlier.\n");
    fmt::print(
        "  measured: wall-clock time of the syscall loop of each step only (mkdir/rm of the\n"
        "          per-repetition subdirectory and the untimed sync(){} between groups "
        "excluded).\n",
        opt.no_sync ? " (disabled)" : "");
    fmt::print("          f = open+1 MiB writes+fsync+close; g = open+1 MiB reads to EOF+close.\n");
    fmt::print(
        "          c = opendir/readdir all + fstatat each entry (ls -l); c' = readdir using d_type "
        "only.\n");
    fmt::print(
        "  ratio = median(dir) / median({}); spread = (max-min)/median over the reps, worst "
        "dir\n\n",
        dirs[0].label);

    // header; column widths follow the label lengths
    std::vector<size_t> wsec(nd), wrat(nd);
    for (size_t i = 0; i < nd; ++i) {
      wsec[i] = std::max<size_t>(9, dirs[i].label.size() + 2);
      wrat[i] = std::max<size_t>(8, dirs[i].label.size() + dirs[0].label.size() + 1);
    }
    std::string h = fmt::format("{:<26} {:>7}", "step", "ops");
    for (size_t i = 0; i < nd; ++i) h += fmt::format(" {:>{}}", dirs[i].label + " s", wsec[i]);
    for (size_t i = 1; i < nd; ++i)
      h += fmt::format(" {:>{}}", dirs[i].label + "/" + dirs[0].label, wrat[i]);
    h += fmt::format(" {:>7}", "spread");
    if (targets) h += fmt::format("  {:>6} {}", "target", dirs[*target_dir].label);
    print_table_header(h);

    bool all_ok = true;
    for (const auto &s : kSteps) {
      if (!want.count(s.id)) continue;
      std::vector<double> med(nd);
      double worst_spread = 0;
      uint64_t ops = 0;
      for (size_t i = 0; i < nd; ++i) {
        std::vector<double> v;
        for (const auto &x : samples)
          if (x.step == s.id && x.dir == i) {
            v.push_back(x.secs);
            ops = x.ops;
          }
        med[i] = median(v);
        worst_spread = std::max(worst_spread, spread(v));
      }
      std::string ops_s = s.kind == Kind::io ? fmt::format("{}M", ops) : fmt::format("{}", ops);
      std::string line = fmt::format("{:<26} {:>7}", s.title, ops_s);
      for (size_t i = 0; i < nd; ++i) line += fmt::format(" {:>{}.4f}", med[i], wsec[i]);
      for (size_t i = 1; i < nd; ++i) {
        if (med[0] > 0) line += fmt::format(" {:>{}.2f}x", med[i] / med[0], wrat[i] - 1);
        else line += fmt::format(" {:>{}}", "-", wrat[i]);
      }
      line += fmt::format(" {:>6.0f}%", worst_spread * 100);
      if (targets) {
        double tgt = s.kind == Kind::meta ? opt.target_meta : opt.target_io;
        if (auto it = opt.step_targets.find(s.id); it != opt.step_targets.end()) tgt = it->second;
        if (tgt > 0 && med[0] > 0) {
          double r = med[*target_dir] / med[0];
          bool ok = r <= tgt;
          all_ok = all_ok && ok;
          line += fmt::format("  {:>5.2g}x {}", tgt, ok ? "ok" : "MISSED");
        }
      }
      fmt::print("{}\n", line);
    }
    // per-op view for orientation
    std::string ph = fmt::format("\n{:<28}", "per operation (median)");
    for (size_t i = 0; i < nd; ++i) ph += fmt::format(" {:>16}", dirs[i].label);
    fmt::print("{}\n", ph);
    for (const auto &s : kSteps) {
      if (!want.count(s.id)) continue;
      std::string line = fmt::format("  {:<26}", s.title);
      for (size_t i = 0; i < nd; ++i) {
        std::vector<double> v;
        uint64_t ops = 0, bytes = 0;
        for (const auto &x : samples)
          if (x.step == s.id && x.dir == i) {
            v.push_back(x.secs);
            ops = x.ops;
            bytes = x.bytes;
          }
        double m = median(v);
        if (s.kind == Kind::io)
          line += fmt::format(" {:>10.0f} MiB/s",
                              m > 0 ? static_cast<double>(bytes) / m / (1 << 20) : 0.0);
        else
          line += fmt::format(" {:>10.1f} us/op", ops ? m / static_cast<double>(ops) * 1e6 : 0.0);
      }
      fmt::print("{}\n", line);
    }
    if (targets)
      fmt::print("\ntargets for {} against {} (the target column): {}\n", dirs[*target_dir].label,
                 dirs[0].label, all_ok ? "all met" : "NOT all met");
  }
};

}  // namespace

int main(int argc, char **argv) {
  Options opt;
  CLI::App app{
      "txnfs-fsbench: side-by-side file-system benchmark (prints ratios against the first --dir)"};
  app.add_option("--dir", opt.dir_specs,
                 "LABEL=PATH of an existing directory to test; give two or more, "
                 "the first is the baseline")
      ->required();
  app.add_option("--reps", opt.reps, "repetitions per step and directory (median is reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--files", opt.files, "number of 4 KiB files for the metadata steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--big-mib", opt.big_mib, "size of the big file for the sequential steps, MiB")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--csv", opt.csv, "append raw per-repetition rows to FILE");
  app.add_option("--steps", opt.steps,
                 "comma-separated subset of steps to time: a,b,c,c',d,e,f,g "
                 "(a and e still run, untimed, when later steps need files)")
      ->capture_default_str();
  app.add_flag("--full-paths", opt.full_paths,
               "use full path names instead of *at() calls on a directory fd");
  app.add_flag("--no-sync", opt.no_sync, "do not call sync() (untimed) between step groups");
  app.add_flag("-v,--verbose", opt.verbose,
               "print each sample with CLOCK_MONOTONIC start/end to stderr");
  app.add_option("--target-label", opt.target_label,
                 "label whose ratios are checked against the targets "
                 "(default: the second --dir)");
  app.add_option("--target-meta", opt.target_meta,
                 "target ratio for the metadata steps a-e (0 = none)");
  app.add_option("--target-io", opt.target_io,
                 "target ratio for the sequential steps f, g (0 = none)");
  app.add_option("--target", opt.target_specs,
                 "STEP=RATIO: the target of one step (repeatable; "
                 "overrides --target-meta/--target-io)")
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  for (const auto &spec : opt.target_specs) {
    auto eq = spec.find('=');
    std::string id = spec.substr(0, eq);
    bool known = std::any_of(kSteps.begin(), kSteps.end(), [&](auto &k) { return k.id == id; });
    char *end = nullptr;
    double r = eq == std::string::npos ? 0 : std::strtod(spec.c_str() + eq + 1, &end);
    if (!known || !(r > 0) || !end || *end) {
      fmt::print(stderr,
                 "txnfs-fsbench: error: --target {}: want STEP=RATIO with a step of "
                 "--steps and a ratio > 0\n",
                 spec);
      return 2;
    }
    opt.step_targets[id] = r;
  }

  std::vector<Dir> dirs;
  std::set<std::string> labels;
  for (const auto &spec : opt.dir_specs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      fmt::print(stderr, "txnfs-fsbench: error: --dir wants LABEL=PATH, got '{}'\n", spec);
      return 2;
    }
    Dir d{spec.substr(0, eq), spec.substr(eq + 1), ""};
    while (d.path.size() > 1 && d.path.back() == '/') d.path.pop_back();
    struct stat st {};
    if (stat(d.path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      fmt::print(stderr, "txnfs-fsbench: error: {} is not a directory\n", d.path);
      return 2;
    }
    if (!labels.insert(d.label).second) {
      fmt::print(stderr, "txnfs-fsbench: error: label '{}' given twice\n", d.label);
      return 2;
    }
    d.fstype = fs_type_name(d.path);
    d.kdev = kernel_dev(st.st_dev);
    dirs.push_back(d);
  }
  if (dirs.size() < 2)
    fmt::print(stderr, "txnfs-fsbench: warning: only one --dir: no ratios to print\n");
  if (!opt.target_label.empty() && !labels.count(opt.target_label)) {
    fmt::print(stderr, "txnfs-fsbench: error: --target-label {} is not a --dir label\n",
               opt.target_label);
    return 2;
  }

  std::set<std::string> want;
  {
    std::string s = opt.steps;
    size_t pos = 0;
    while (pos <= s.size()) {
      size_t c = s.find(',', pos);
      std::string id = s.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
      if (!id.empty()) {
        bool known = std::any_of(kSteps.begin(), kSteps.end(), [&](auto &k) { return k.id == id; });
        if (!known) {
          fmt::print(stderr, "txnfs-fsbench: error: unknown step '{}'\n", id);
          return 2;
        }
        want.insert(id);
      }
      if (c == std::string::npos) break;
      pos = c + 1;
    }
  }

  install_interrupt_handlers();

  WorkDirs workdirs("fsbench");
  int rc = exit_status_of("txnfs-fsbench", "interrupted, cleaning up", [&] {
    Bench b(opt, dirs, workdirs);
    b.want = want;
    if (!opt.csv.empty())
      b.csv = open_csv(
          opt.csv, "run_id,unix_time,label,path,rep,order,step,seconds,ops,bytes,files,big_mib");
    b.run();
    b.report();
    return 0;
  });
  workdirs.remove_left();
  return rc;
}
