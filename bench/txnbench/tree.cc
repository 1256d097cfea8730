#include "bench/txnbench/tree.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "bench/lib/errors.h"
#include "bench/lib/files.h"
#include "bench/lib/interrupt.h"

namespace txnbench {

using namespace bench;

namespace fsys = std::filesystem;

namespace {

// splitmix64: a deterministic generator whose output does not depend on the C++ library
// (std:: distributions are implementation-defined, so they are not used for the tree).
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0,1)
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
  double normal() {  // Box-Muller
    double u1 = std::max(uniform(), 1e-300), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }
};

}  // namespace

TreeStats count_tree(const std::string &dir) {
  TreeStats t;
  for (auto &e : fsys::recursive_directory_iterator(dir)) {
    if (e.is_symlink()) continue;
    if (e.is_directory()) ++t.dirs;
    else if (e.is_regular_file()) {
      ++t.files;
      t.bytes += e.file_size();
    }
  }
  return t;
}

TreeStats gen_tree(const std::string &out, const TreeSpec &spec) {
  static const char *kDirBase[] = {"src",   "lib",    "include",  "drivers", "net",      "fs",
                                   "core",  "util",   "tests",    "docs",    "arch",     "kernel",
                                   "mm",    "tools",  "scripts",  "crypto",  "block",    "sound",
                                   "ipc",   "common", "platform", "api",     "internal", "proto",
                                   "codec", "io",     "sched",    "cache",   "db",       "ui"};
  static const char *kStem[] = {"main",   "util",  "parser", "buffer", "config",  "device",
                                "queue",  "table", "hash",   "list",   "alloc",   "init",
                                "io",     "sync",  "map",    "string", "stream",  "socket",
                                "timer",  "event", "log",    "error",  "handler", "server",
                                "client", "test",  "bench",  "format", "cache"};
  struct Ext {
    const char *ext;
    double weight;
  };
  static const Ext kExt[] = {{"c", 30}, {"h", 22}, {"py", 10}, {"cc", 8},   {"rs", 5},   {"go", 4},
                             {"S", 2},  {"md", 5}, {"txt", 4}, {"json", 4}, {"yaml", 3}, {"sh", 3}};
  static const char *kTok[] = {
      "static", "int",  "void",     "struct", "return",   "if",   "else", "for",    "while",
      "const",  "char", "unsigned", "size_t", "uint64_t", "NULL", "err",  "ret",    "len",
      "buf",    "ctx",  "dev",      "node",   "next",     "prev", "lock", "unlock", "alloc",
      "free",   "init", "exit",     "read",   "write",    "(",    ")",    "{",      "}",
      ";",      "=",    "==",       "->",     "&&",       "||",   "+",    "0",      "1"};

  Rng rng(spec.seed);
  // Directories: 0 is "src"; each later one hangs below a recent one (deep chains) or
  // any one (breadth), at most 8 levels deep.
  std::vector<std::string> dpath(spec.dirs);
  std::vector<uint64_t> depth(spec.dirs, 0);
  TreeStats st;
  dpath[0] = "src";
  for (uint64_t k = 1; k < spec.dirs; ++k) {
    uint64_t parent;
    for (;;) {
      parent = rng.uniform() < 0.55 ? k - 1 - rng.below(std::min<uint64_t>(k, 24)) : rng.below(k);
      if (depth[parent] < 7) break;
    }
    depth[k] = depth[parent] + 1;
    st.max_depth = std::max(st.max_depth, depth[k] + 1);
    dpath[k] = fmt::format("{}/{}{}", dpath[parent], kDirBase[rng.below(std::size(kDirBase))], k);
  }
  // Uneven directory weights: u^8 gives a few heavy directories and a long light tail.
  std::vector<double> cum(spec.dirs);
  double acc = 0;
  for (uint64_t k = 0; k < spec.dirs; ++k) {
    double u = rng.uniform();
    double u2 = u * u, u4 = u2 * u2;
    acc += u4 * u4 + 0.004;
    cum[k] = acc;
  }
  double ext_total = 0;
  for (auto &e : kExt) ext_total += e.weight;

  // Sizes: log-normal, sigma 1.3, 2% empty, capped at 2 MiB, then scaled to the mean.
  const double sigma = 1.3;
  const double mean = spec.mean_kib * 1024.0;
  const double mu = std::log(mean) - sigma * sigma / 2;
  std::vector<double> raw(spec.files);
  double total = 0;
  for (auto &s : raw) {
    s = rng.uniform() < 0.02 ? 0.0 : std::min(std::exp(mu + sigma * rng.normal()), 2097152.0);
    total += s;
  }
  double scale = total > 0 ? mean * static_cast<double>(spec.files) / total : 1;
  std::vector<uint64_t> sizes(spec.files);
  for (size_t i = 0; i < raw.size(); ++i)
    sizes[i] = static_cast<uint64_t>(std::llround(raw[i] * scale));

  // The text: a 1 MiB corpus of code-like lines; each file is a slice of it.
  std::string corpus;
  corpus.reserve((1 << 20) + 256);
  while (corpus.size() < (1u << 20)) {
    int indent = static_cast<int>(rng.below(4)) * 4;
    std::string line(static_cast<size_t>(indent), ' ');
    int ntok = 2 + static_cast<int>(rng.below(10));
    for (int t = 0; t < ntok; ++t) {
      if (t) line += ' ';
      line += kTok[rng.below(std::size(kTok))];
    }
    corpus += line + "\n";
  }
  const uint64_t clen = corpus.size();

  fsys::create_directories(out);
  for (auto &p : dpath) fsys::create_directories(out + "/" + p);
  st.dirs = spec.dirs;
  std::vector<uint64_t> sorted = sizes;
  for (uint64_t i = 0; i < spec.files; ++i) {
    check_interrupt();
    double r = rng.uniform() * acc;
    uint64_t d = static_cast<uint64_t>(std::lower_bound(cum.begin(), cum.end(), r) - cum.begin());
    if (d >= spec.dirs) d = spec.dirs - 1;
    double e = rng.uniform() * ext_total;
    const char *ext = kExt[0].ext;
    for (auto &x : kExt) {
      if (e < x.weight) {
        ext = x.ext;
        break;
      }
      e -= x.weight;
    }
    std::string path =
        fmt::format("{}/{}/{}_{}.{}", out, dpath[d], kStem[rng.below(std::size(kStem))], i, ext);
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) sys_fail("create", path);
    uint64_t left = sizes[i], pos = rng.below(clen);
    while (left > 0) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(left, clen - pos));
      write_all(fd, corpus.data() + pos, n, 0, false, path);
      left -= n;
      pos = 0;
    }
    if (close(fd) != 0) sys_fail("close", path);
    st.bytes += sizes[i];
    st.max = std::max(st.max, sizes[i]);
    if (sizes[i] == 0) ++st.empty;
  }
  st.files = spec.files;
  std::sort(sorted.begin(), sorted.end());
  st.median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  return st;
}

}  // namespace txnbench
