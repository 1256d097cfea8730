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

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include <dirent.h>
#include <sys/xattr.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/lib/buffer.h"
#include "bench/lib/clock.h"
#include "bench/lib/errors.h"
#include "bench/lib/files.h"
#include "bench/lib/interrupt.h"
#include "bench/lib/output.h"
#include "bench/lib/stats.h"
#include "bench/lib/workdirs.h"
#include "txnfs/txnfs.h"

extern char **environ;

namespace {

using namespace bench;

namespace fsys = std::filesystem;

// ---- small helpers of this program (the shared ones are in bench/lib) ---------------

[[noreturn]] void fail(const std::string &msg) { throw std::runtime_error(msg); }

std::string human_bytes(uint64_t b) {
    if (b >= (uint64_t(1) << 30) && b % (uint64_t(1) << 30) == 0) return fmt::format("{}G", b >> 30);
    if (b >= (uint64_t(1) << 20) && b % (uint64_t(1) << 20) == 0) return fmt::format("{}M", b >> 20);
    if (b >= 1024 && b % 1024 == 0) return fmt::format("{}K", b >> 10);
    return fmt::format("{}", b);
}

uint64_t parse_size(const std::string &s) {
    if (s.empty()) fail("empty size");
    size_t pos = 0;
    uint64_t v = std::stoull(s, &pos);
    std::string suf = s.substr(pos);
    if (suf.empty() || suf == "B") return v;
    if (suf == "K" || suf == "k" || suf == "KiB") return v << 10;
    if (suf == "M" || suf == "MiB") return v << 20;
    if (suf == "G" || suf == "GiB") return v << 30;
    fail("bad size '" + s + "' (use e.g. 1K, 64K, 1M)");
}

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

// ---- child processes -------------------------------------------------------------------

// Starts ARGV (PATH lookup) with stdout/stderr to files ("" = inherit); returns its pid.
pid_t spawn(const std::vector<std::string> &argv, const std::string &out, const std::string &err) {
    std::vector<char *> a;
    for (auto &s : argv) a.push_back(const_cast<char *>(s.c_str()));
    a.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (!out.empty()) posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (!err.empty()) posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = 0;
    int rc = posix_spawnp(&pid, a[0], &fa, nullptr, a.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        errno = rc;
        sys_fail("cannot run", argv[0]);
    }
    return pid;
}

// Runs ARGV as spawn() starts it; returns its wait status.
int run_wait(const std::vector<std::string> &argv, const std::string &out = "", const std::string &err = "") {
    pid_t pid = spawn(argv, out, err);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) sys_fail("waitpid", argv[0]);
    }
    return status;
}

// Sends SIGINT to the child PID (a tracer: it writes its results then) and waits until it has exited.
void interrupt_child(pid_t pid) {
    kill(pid, SIGINT);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
}

std::string describe_status(int st) {
    if (WIFEXITED(st)) return fmt::format("exit status {}", WEXITSTATUS(st));
    if (WIFSIGNALED(st)) return fmt::format("signal {}", WTERMSIG(st));
    return fmt::format("wait status {}", st);
}

std::string read_file(const std::string &p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::string last_lines(const std::string &text, int n) {
    std::vector<std::string> lines;
    std::istringstream is(text);
    for (std::string l; std::getline(is, l);) lines.push_back(l);
    std::string r;
    for (size_t i = lines.size() > size_t(n) ? lines.size() - n : 0; i < lines.size(); ++i) r += "  | " + lines[i] + "\n";
    return r;
}

// A record's name in a log: 16 lower-case hex digits (src/recovery/undo/undo_record.h).
bool is_record_name(std::string_view n) {
    return n.size() == 16 && std::all_of(n.begin(), n.end(), [](char c) {
               return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
           });
}

// Undo steps (records: xattrs "trusted.txnfs.<seq>" of the log directory, and symlinks
// "<seq>" in it) and other entries of the log DIR; {0, 0} if it cannot be read.
std::pair<uint64_t, uint64_t> count_log(const std::string &dir) {
    uint64_t records = 0, other = 0;
    DIR *d = opendir(dir.c_str());
    if (!d) return {0, 0};
    while (dirent *e = readdir(d)) {
        if (is_dot_or_dotdot(e->d_name)) continue;
        if (e->d_type == DT_LNK && is_record_name(e->d_name)) ++records;
        else if (e->d_type != DT_LNK) ++other;
    }
    closedir(d);
    std::vector<char> names(65536);
    ssize_t len = listxattr(dir.c_str(), names.data(), names.size());
    const std::string_view prefix = "trusted.txnfs.";
    for (ssize_t i = 0; i < len; i += ssize_t(strlen(names.data() + i)) + 1) {
        std::string_view n(names.data() + i);
        if (n.substr(0, prefix.size()) == prefix && is_record_name(n.substr(prefix.size()))) ++records;
    }
    return {records, other};
}

// The only subdirectory of BACKUPS (the undo log of the one open transaction), or "".
std::string only_log_dir(const std::string &backups) {
    std::string found;
    DIR *d = opendir(backups.c_str());
    if (!d) return "";
    int n = 0;
    while (dirent *e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        found = backups + "/" + e->d_name;
        ++n;
    }
    closedir(d);
    return n == 1 ? found : "";
}

// ---- stamp: the wrapper that timestamps the exit of tar --------------------------------

// What the wrapper writes to its OUT file, one line: "T_EXIT T_COUNTED STEPS OBJECTS STATUS".
struct Stamp {
    double t_exit = 0;     // CLOCK_MONOTONIC when the command exited
    double t_counted = 0;  // ... and when the undo log was counted (a window left out of every result)
    unsigned long long steps = 0, objects = 0;  // the undo log: symlinks (undo steps), other entries
    int status = 0;                             // the command's wait status
};

// Writes S to PATH; nothing when PATH cannot be opened (read_stamp() then fails).
void write_stamp(const std::string &path, const Stamp &s) {
    FILE *f = fopen(path.c_str(), "w");
    if (!f) return;
    fprintf(f, "%.9f %.9f %llu %llu %d\n", s.t_exit, s.t_counted, s.steps, s.objects, s.status);
    fclose(f);
}

// The Stamp the wrapper wrote to PATH; throws when there is none.
Stamp read_stamp(const std::string &path) {
    Stamp s;
    FILE *f = fopen(path.c_str(), "r");
    const bool ok = f && fscanf(f, "%lf %lf %llu %llu %d", &s.t_exit, &s.t_counted, &s.steps, &s.objects, &s.status) == 5;
    if (f) fclose(f);
    if (!ok) fail("no timestamp from the stamp wrapper in " + path);
    return s;
}

int stamp_main(int argc, char **argv) {
    // argv: txnfs-txnbench stamp OUT COUNT_DIR -- CMD ARGS...
    if (argc < 6 || std::string(argv[4]) != "--") {
        fmt::print(stderr, "usage: txnfs-txnbench stamp OUT COUNT_DIR|- -- CMD [ARGS...]\n");
        return 125;
    }
    std::string out = argv[2], count_dir = argv[3];
    pid_t pid = fork();
    if (pid < 0) {
        perror("txnfs-txnbench stamp: fork");
        return 125;
    }
    if (pid == 0) {
        execvp(argv[5], argv + 5);
        perror("txnfs-txnbench stamp: exec");
        _exit(127);
    }
    Stamp s;
    while (waitpid(pid, &s.status, 0) < 0 && errno == EINTR) {
    }
    s.t_exit = now_mono();
    // Optionally count the undo log of the (one) open transaction before txnfs run
    // ends it; the time this takes is written too, and left out of every result.
    if (count_dir != "-") {
        std::string log = only_log_dir(count_dir);
        if (!log.empty()) std::tie(s.steps, s.objects) = count_log(log);
    }
    s.t_counted = now_mono();
    write_stamp(out, s);
    if (WIFEXITED(s.status)) return WEXITSTATUS(s.status);
    return 128 + (WIFSIGNALED(s.status) ? WTERMSIG(s.status) : 0);
}

// ---- the generated source tree -----------------------------------------------------------

struct TreeSpec {
    uint64_t files = 10000;
    uint64_t dirs = 700;
    double mean_kib = 15;
    uint64_t seed = 42;
};

struct TreeStats {
    uint64_t files = 0, dirs = 0, bytes = 0, empty = 0, max = 0, median = 0, max_depth = 0;
};

// Files and directories below DIR as tar_extract counts an extraction (symbolic links
// are not counted: a package's may point out of the tree), and the files' bytes.
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

// A source-like tree: 700 directories of realistic names nested up to 8 deep, files
// spread unevenly over them (a few big directories, many small ones), sizes log-normal
// (median about 6 KiB, a long tail to 2 MiB, 2% empty) rescaled to the requested mean,
// text that looks like C/Python source. Deterministic from the seed.
TreeStats gen_tree(const std::string &out, const TreeSpec &spec) {
    static const char *kDirBase[] = {"src", "lib", "include", "drivers", "net", "fs", "core", "util",
                                     "tests", "docs", "arch", "kernel", "mm", "tools", "scripts",
                                     "crypto", "block", "sound", "ipc", "common", "platform", "api",
                                     "internal", "proto", "codec", "io", "sched", "cache", "db", "ui"};
    static const char *kStem[] = {"main", "util", "parser", "buffer", "config", "device", "queue",
                                  "table", "hash", "list", "alloc", "init", "io", "sync", "map",
                                  "string", "stream", "socket", "timer", "event", "log", "error",
                                  "handler", "server", "client", "test", "bench", "format", "cache"};
    struct Ext {
        const char *ext;
        double weight;
    };
    static const Ext kExt[] = {{"c", 30}, {"h", 22}, {"py", 10}, {"cc", 8}, {"rs", 5}, {"go", 4},
                               {"S", 2},  {"md", 5}, {"txt", 4}, {"json", 4}, {"yaml", 3}, {"sh", 3}};
    static const char *kTok[] = {"static", "int", "void", "struct", "return", "if", "else", "for",
                                 "while", "const", "char", "unsigned", "size_t", "uint64_t", "NULL",
                                 "err", "ret", "len", "buf", "ctx", "dev", "node", "next", "prev",
                                 "lock", "unlock", "alloc", "free", "init", "exit", "read", "write",
                                 "(", ")", "{", "}", ";", "=", "==", "->", "&&", "||", "+", "0", "1"};

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
    for (size_t i = 0; i < raw.size(); ++i) sizes[i] = static_cast<uint64_t>(std::llround(raw[i] * scale));

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
        std::string path = fmt::format("{}/{}/{}_{}.{}", out, dpath[d], kStem[rng.below(std::size(kStem))], i, ext);
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

// ---- the daemon, seen from /proc ---------------------------------------------------------

struct ProcMem {
    uint64_t rss_kib = 0, hwm_kib = 0, threads = 0;
};

ProcMem read_mem(pid_t pid) {
    ProcMem m;
    std::ifstream f(fmt::format("/proc/{}/status", pid));
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("VmRSS:", 0) == 0) m.rss_kib = std::stoull(line.substr(6));
        else if (line.rfind("VmHWM:", 0) == 0) m.hwm_kib = std::stoull(line.substr(6));
        else if (line.rfind("Threads:", 0) == 0) m.threads = std::stoull(line.substr(8));
    }
    return m;
}

// User+system CPU seconds of the whole process (all threads, also exited ones).
double read_cpu(pid_t pid) {
    if (pid <= 0) return 0;
    std::string s = read_file(fmt::format("/proc/{}/stat", pid));
    auto rp = s.rfind(')');
    if (rp == std::string::npos) return 0;
    std::istringstream is(s.substr(rp + 2));
    std::string tok;
    std::vector<std::string> f;
    while (is >> tok) f.push_back(tok);
    // fields after "comm": state(3) ... utime(14) stime(15) -> indexes 11, 12 here
    if (f.size() < 13) return 0;
    return static_cast<double>(std::stoull(f[11]) + std::stoull(f[12])) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// ---- the benchmark ------------------------------------------------------------------------

enum Cfg { X = 0, P = 1, T = 2, L = 3 };
const char *kCfgName[] = {"X", "P", "T", "L"};
const char *kCfgTitle[] = {"X = raw XFS directory on the image", "P = txnfs mount, no transaction",
                           "T = txnfs mount, one transaction (commit timed)",
                           "L = T-lazy: as T, committed lazily (TXNFS_COMMIT_LAZY)"};
bool txn_cfg(Cfg c) { return c == T || c == L; }

struct Options {
    std::string xfs_dir, mount, store, work, txnfs, tarball, csv, trace;
    std::string tree_from;  // tar this directory (a package's files) instead of a generated tree
    pid_t daemon = 0;
    int reps = 3;
    uint64_t files = 1000;
    std::string sizes = "1K,64K,1M";
    std::string workloads = "write,overwrite,tar,abort,rss";
    std::string configs = "X,P,T,L";
    TreeSpec tree;
    uint64_t rss_ops = 100000, rss_new = 10000, rss_existing = 5000;
    bool verbose = false;
};

struct Sample {
    std::string workload;
    Cfg cfg;
    int rep, order;
    uint64_t files = 0, bytes = 0;
    double secs = 0;          // the result: whole workload, T: begin..commit returned
    double commit = -1;       // T: the commit (txnfs_commit, or tar exit -> txnfs run exit)
    double extract = -1;      // abort: txnfs run start -> tar exit
    double abort = -1;        // abort: tar exit -> txnfs run exit
    double sync_after = 0;    // untimed context: syncfs of the image right after
    double daemon_cpu = 0;    // daemon user+sys CPU during the sample
    uint64_t txn_ops = 0, undo_steps = 0, undo_objects = 0, backup_bytes = 0;
    uint64_t daemon_rss_kib = 0;  // daemon VmRSS right after the sample
};

struct Tracer;  // --trace: strace -c, perf record, or FUSE request counts, per sample

// What a tracer saw during one sample.
struct TraceResult {
    std::string workload;
    Cfg cfg = P;
    uint64_t files = 0;
    std::map<std::string, double> counts;  // syscall or FUSE opcode -> calls
    double total = 0;                      // all calls
    std::string text;                      // perf: the report
};

struct Bench {
    Options opt;
    std::string self;     // this executable (the stamp wrapper)
    std::string backups;  // STORE/.txnfs/backups
    int xfs_fd = -1;      // for syncfs of the image
    std::vector<uint64_t> sizes;
    std::set<std::string> want;
    std::vector<Cfg> cfgs;
    AlignedBuffer buf_a, buf_b;  // what write and overwrite write (rss: overwrites and new files)
    std::vector<Sample> samples;
    std::unique_ptr<std::ofstream> csv;
    std::string run_id;
    TreeStats tree;
    uint64_t tar_bytes = 0;
    uint64_t start_rss_kib = 0, start_threads = 0;
    WorkDirs workdirs{"txnbench"};  // cleanup() removes what is left of them
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
    std::string make_dir(Cfg c, const std::string &tag) {
        return workdirs.make(fmt::format("{}/txnbench.{}.{}.{}", dir_of(c), getpid(), kCfgName[c], tag));
    }

    void cleanup() {
        if (open_txn) {
            int rc = txnfs_abort(opt.mount.c_str(), *open_txn);
            if (rc < 0) fmt::print(stderr, "txnbench: warning: abort of transaction {}: {}\n", *open_txn, strerror(-rc));
            open_txn.reset();
        }
        workdirs.remove_left();
    }

    // Equal starting states: everything written so far is on disk (untimed sync), the
    // daemon has no open transaction and no undo log left to discard in the background.
    void quiesce() {
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
                fmt::print(stderr, "txnbench: warning: still waiting for the daemon to discard undo logs ({})\n", backups);
                warned = true;
            }
            if (now_mono() - t0 > 300) fail("the daemon did not discard its undo logs within 300 s");
            usleep(10000);
        }
        sync();
    }

    double time_syncfs() {
        double t0 = now_mono();
        if (syncfs(xfs_fd) != 0) sys_fail("syncfs", opt.xfs_dir);
        return now_mono() - t0;
    }

    void record(Sample s) {
        if (opt.daemon > 0) s.daemon_rss_kib = read_mem(opt.daemon).rss_kib;
        if (opt.verbose)
            fmt::print(stderr, "txnbench: {} {} rep={} secs={:.4f} commit={:.4f} extract={:.4f} abort={:.4f} sync_after={:.4f} "
                               "daemon_cpu={:.2f} txn_ops={} undo_steps={} daemon_rss={}k\n",
                       s.workload, kCfgName[s.cfg], s.rep, s.secs, s.commit, s.extract, s.abort, s.sync_after,
                       s.daemon_cpu, s.txn_ops, s.undo_steps, s.daemon_rss_kib);
        if (csv) {
            auto opt_num = [](double v) { return v < 0 ? std::string() : fmt::format("{:.9f}", v); };
            *csv << fmt::format("{},{},{},{},{},{},{},{},{:.9f},{},{},{},{:.9f},{:.3f},{},{},{},{},,,,{}\n", run_id,
                                static_cast<long long>(time(nullptr)), s.workload, kCfgName[s.cfg], s.rep, s.order,
                                s.files, s.bytes, s.secs, opt_num(s.commit), opt_num(s.extract), opt_num(s.abort),
                                s.sync_after, s.daemon_cpu, s.txn_ops, s.undo_steps, s.undo_objects, s.backup_bytes,
                                s.daemon_rss_kib);
            csv->flush();
        }
        samples.push_back(std::move(s));
    }

    // A transaction of this thread; its undo log is counted outside the timing.
    txnfs_id_t begin_thread_txn() {
        txnfs_id_t id = 0;
        int rc = txnfs_begin(opt.mount.c_str(), TXNFS_BIND_THREAD, 0, &id);
        if (rc < 0) fail(fmt::format("txnfs_begin({}): {}", opt.mount, strerror(-rc)));
        open_txn = id;
        return id;
    }

    void inspect_txn(txnfs_id_t id, Sample &s) {
        struct txnfs_info info {};
        if (txnfs_info(opt.mount.c_str(), id, &info) == 0) {
            s.txn_ops = info.ops;
            s.backup_bytes = info.backup_bytes;
        }
        std::tie(s.undo_steps, s.undo_objects) = count_log(fmt::format("{}/{}", backups, id));
    }

    void commit_txn(txnfs_id_t id, bool lazy = false) {
        int rc = txnfs_commit2(opt.mount.c_str(), id, lazy ? TXNFS_COMMIT_LAZY : TXNFS_COMMIT_DURABLE);
        open_txn.reset();
        if (rc < 0) fail(fmt::format("txnfs_commit({}): {}", id, strerror(-rc)));
    }

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

// ---- --trace: a tracer attached to the daemon around one sample -------------------------
//   strace  `strace -c -f -p DAEMON`: syscalls of the daemon, counted per file
//   fuse    `perf record -a -e fuse:fuse_request_send`: the requests the kernel sent to
//           this mount's FUSE connection, by opcode, per file
//   perf    `perf record -e cpu-clock --call-graph dwarf -p DAEMON`: where its CPU goes

struct Tracer {
    std::string kind;
    pid_t daemon = 0;
    uint64_t kdev = 0;
    std::string dir;
    pid_t pid = 0;
    std::string out;

    ~Tracer() {  // interrupted or failed mid-sample: do not leave the tracer running
        if (pid > 0) interrupt_child(pid);
    }

    bool traced_now() const {
        // strace is attached when every thread of the daemon shows a TracerPid.
        std::error_code ec;
        for (auto &t : fsys::directory_iterator(fmt::format("/proc/{}/task", daemon), ec)) {
            std::ifstream f(t.path().string() + "/status");
            std::string line;
            bool traced = false;
            while (std::getline(f, line))
                if (line.rfind("TracerPid:", 0) == 0) traced = std::stol(line.substr(10)) != 0;
            if (!traced) return false;
        }
        return !ec;
    }

    void start(const std::string &tag) {
        out = fmt::format("{}/{}.{}", dir, tag, kind == "strace" ? "strace" : "perf.data");
        std::vector<std::string> argv;
        if (kind == "strace")
            argv = {"strace", "-c", "-f", "-o", out, "-p", std::to_string(daemon)};
        else if (kind == "fuse")
            argv = {"perf", "record", "-q", "-a", "-m", "16M", "-e", "fuse:fuse_request_send", "-o", out};
        else
            argv = {"perf", "record", "-q", "-F", "999", "-e", "cpu-clock", "--call-graph", "dwarf,8192",
                    "-o", out, "-p", std::to_string(daemon)};
        pid = spawn(argv, "", out + ".log");
        if (kind == "strace") {
            double t0 = now_mono();
            while (!traced_now() && now_mono() - t0 < 10) usleep(20000);
        }
        usleep(kind == "strace" ? 300000 : 1000000);  // let perf attach / strace settle
    }

    TraceResult stop(const std::string &workload, Cfg cfg, uint64_t files) {
        TraceResult r;
        r.workload = workload;
        r.cfg = cfg;
        r.files = files;
        if (pid <= 0) return r;
        interrupt_child(pid);
        pid = 0;
        if (kind == "strace") {
            // "% time  seconds  usecs/call  calls  [errors]  syscall"
            std::istringstream is(read_file(out));
            for (std::string l; std::getline(is, l);) {
                std::istringstream ls(l);
                std::vector<std::string> tok;
                for (std::string t; ls >> t;) tok.push_back(t);
                if (tok.size() < 5 || !std::isdigit(static_cast<unsigned char>(tok[0][0]))) continue;
                if (tok.back() == "total") continue;
                double calls = std::strtod(tok[3].c_str(), nullptr);
                r.counts[tok.back()] += calls;
                r.total += calls;
            }
            return r;
        }
        if (kind == "fuse") {
            std::string txt = out + ".txt";
            run_wait({"perf", "script", "-i", out, "-F", "trace"}, txt, out + ".script.log");
            std::ifstream f(txt);
            const std::string conn = fmt::format("connection {} ", kdev);
            for (std::string l; std::getline(f, l);) {
                if (l.find(conn) == std::string::npos) continue;
                auto a = l.find('('), b = l.find(')', a == std::string::npos ? 0 : a);
                if (a == std::string::npos || b == std::string::npos) continue;
                r.counts[l.substr(a + 1, b - a - 1)] += 1;
                r.total += 1;
            }
            std::remove(txt.c_str());
            return r;
        }
        // perf: CPU by dso, then the heaviest call chains (inclusive time)
        std::string rep1 = out + ".dso.txt", rep2 = out + ".sym.txt";
        run_wait({"perf", "report", "-i", out, "--stdio", "--no-children", "--sort", "dso", "-g", "none",
                  "--percent-limit", "1"},
                 rep1, out + ".report.log");
        run_wait({"perf", "report", "-i", out, "--stdio", "--children", "--sort", "dso,sym", "-g", "none",
                  "--percent-limit", "1"},
                 rep2, out + ".report.log");
        // KEEP: up to MAX report lines (with ONLY: only lines naming the daemon or SQLite).
        auto keep = [](const std::string &file, int max, bool only) {
            std::istringstream is(read_file(file));
            std::string res;
            int n = 0;
            for (std::string l; std::getline(is, l);) {
                if (l.rfind("# Samples", 0) == 0 && !only) res += l + "\n";
                if (l.empty() || l[0] == '#') continue;
                if (only && l.find(" txnfs ") == std::string::npos && l.find("libsqlite3") == std::string::npos) continue;
                res += l + "\n";
                if (++n >= max) break;
            }
            return res;
        };
        r.text = "by dso (self):\n" + keep(rep1, 12, false) + "heaviest call chains (children = inclusive):\n" +
                 keep(rep2, 16, false) + "heaviest in the daemon and SQLite (inclusive):\n" + keep(rep2, 30, true);
        return r;
    }
};

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
        const std::string wl = fmt::format("{}-{}", overwrite ? "overwrite" : "write", human_bytes(size));
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
            int fd = overwrite ? openat(dfd, names[i].c_str(), O_WRONLY | O_CLOEXEC)
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
                fail(fmt::format("{}: {} has size {} or content not as written", wl, wd + "/" + names[i], st.st_size));
        }
        if (timed) record(s);
        if (!want.count("overwrite")) break;
    }
    close(dfd);
    workdirs.remove(wd);
}

void Bench::tar_extract(Cfg c, int rep, int order, Tracer *tr) {
    std::string wd = make_dir(c, fmt::format("r{}.tar", rep));
    std::string stampf = fmt::format("{}/stamp.{}.{}", opt.work, kCfgName[c], rep);
    std::string errf = fmt::format("{}/run.{}.{}.err", opt.work, kCfgName[c], rep);
    std::vector<std::string> argv = in_txn(c);
    for (auto &a : {self, std::string("stamp"), stampf, txn_cfg(c) ? backups : std::string("-"), std::string("--"),
                    std::string("tar"), std::string("-xf"), opt.tarball, std::string("-C"), wd})
        argv.push_back(a);
    quiesce();
    if (tr && c != X) tr->start(fmt::format("tar.{}", kCfgName[c]));
    Sample s{.workload = "tar", .cfg = c, .rep = rep, .order = order, .files = tree.files, .bytes = tree.bytes};
    double cpu0 = read_cpu(opt.daemon);
    double t0 = now_mono();
    int st = run_wait(argv, "", errf);
    double t_end = now_mono();
    s.daemon_cpu = read_cpu(opt.daemon) - cpu0;
    if (tr && c != X) traces.push_back(tr->stop("tar", c, tree.files));
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail(fmt::format("tar on {} failed ({}):\n{}", kCfgName[c], describe_status(st), last_lines(read_file(errf), 8)));
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
        fail(fmt::format("tar on {}: {} files and {} directories extracted, want {} and {}", kCfgName[c], got.files,
                         got.dirs, tree.files, tree.dirs));
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
    Sample s{.workload = "rm", .cfg = c, .rep = rep, .order = order, .files = tree.files, .bytes = tree.bytes};
    double cpu0 = read_cpu(opt.daemon);
    double t0 = now_mono();
    int st = run_wait(argv, "", errf);
    s.secs = now_mono() - t0;
    s.daemon_cpu = read_cpu(opt.daemon) - cpu0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail(fmt::format("rm -rf on {} failed ({}):\n{}", kCfgName[c], describe_status(st), last_lines(read_file(errf), 8)));
    if (fsys::exists(wd)) fail(fmt::format("rm -rf on {}: {} is still there", kCfgName[c], wd));
    s.sync_after = time_syncfs();
    record(s);
}

void Bench::tar_abort(int rep, Tracer *tr) {
    std::string wd = make_dir(T, fmt::format("r{}.abort", rep));
    std::string stampf = fmt::format("{}/stamp.abort.{}", opt.work, rep);
    std::string errf = fmt::format("{}/run.abort.{}.err", opt.work, rep);
    std::vector<std::string> argv = {opt.txnfs, "run", "--abort", opt.mount, "--", self,     "stamp",
                                     stampf,    backups, "--",    "tar",      "-xf", opt.tarball, "-C", wd};
    quiesce();
    if (tr) tr->start("abort.T");
    Sample s{.workload = "abort", .cfg = T, .rep = rep, .order = 0, .files = tree.files, .bytes = tree.bytes};
    double cpu0 = read_cpu(opt.daemon);
    double t0 = now_mono();
    int st = run_wait(argv, "", errf);
    double t_end = now_mono();
    s.daemon_cpu = read_cpu(opt.daemon) - cpu0;
    if (tr) traces.push_back(tr->stop("abort", T, tree.files));
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail(fmt::format("txnfs run --abort tar failed ({}):\n{}", describe_status(st), last_lines(read_file(errf), 8)));
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
    fmt::print(stderr, "txnbench: rss: creating {} existing files of 64 KiB (plain, untimed)\n", opt.rss_existing);
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
            for ([[maybe_unused]] auto &e : fsys::directory_iterator(fmt::format("/proc/{}/fd", opt.daemon), ec)) ++fds;
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
                std::string p = opt.rss_existing ? path_old(j) : path_new(j % std::max<uint64_t>(next_new, 1));
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
        *csv << fmt::format("{},{},rss,T,0,0,{},0,{:.9f},{:.9f},,,0,0,{},{},{},{},{},{},{},{}\n", run_id,
                            static_cast<long long>(time(nullptr)), rss.created + rss.overwrites + rss.setattrs, rss.secs,
                            rss.commit, rss.ops, rss.steps, rss.objects, rss.backup, rss.base_kib, rss.peak_rss_kib,
                            rss.hwm_kib, rss.after_kib);
        csv->flush();
    }
    quiesce();
    workdirs.remove(wd);
}

void Bench::prepare_tarball() {
    std::string src = opt.work + "/tree-src";
    opt.tarball = opt.work + "/tree.tar";
    if (!opt.tree_from.empty()) {
        src = opt.tree_from;
        tree = count_tree(src);
        fmt::print(stderr, "txnbench: the tree of {} ({} files, {} directories, {} bytes)\n", src, tree.files,
                   tree.dirs, tree.bytes);
    } else {
        fmt::print(stderr, "txnbench: generating the source tree ({} files, {} directories, mean {} KiB, seed {})\n",
                   opt.tree.files, opt.tree.dirs, opt.tree.mean_kib, opt.tree.seed);
        tree = gen_tree(src, opt.tree);
    }
    int st = run_wait({"tar", "-cf", opt.tarball, "--sort=name", "--owner=0", "--group=0", "--numeric-owner",
                       "--mtime=@1700000000", "-C", src, "."},
                      "", opt.work + "/tar-create.err");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail(fmt::format("tar -cf failed ({}): {}", describe_status(st), read_file(opt.work + "/tar-create.err")));
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
                    fmt::print(stderr, "txnbench: rep {}/{} ({}) {} x {} files on {}\n", rep + 1, opt.reps, order_s,
                               opt.files, human_bytes(size), kCfgName[order[k]]);
                    files_pair(order[k], rep, static_cast<int>(k), size, tr);
                }
        if (want.count("tar"))
            for (size_t k = 0; k < order.size(); ++k) {
                fmt::print(stderr, "txnbench: rep {}/{} ({}) tar -xf on {}\n", rep + 1, opt.reps, order_s, kCfgName[order[k]]);
                tar_extract(order[k], rep, static_cast<int>(k), tr);
            }
        if (want.count("abort") && has_t) {
            fmt::print(stderr, "txnbench: rep {}/{} txnfs run --abort tar -xf on T\n", rep + 1, opt.reps);
            tar_abort(rep, tr);
        }
    }
    if (want.count("rss") && has_t && opt.rss_ops > 0) rss_run();
}

void Bench::print_traces() const {
    if (traces.empty()) return;
    const char *what = opt.trace == "strace" ? "daemon syscalls (strace -c -f -p)"
                       : opt.trace == "fuse" ? "FUSE requests to this mount (perf tracepoint fuse:fuse_request_send)"
                                             : "daemon CPU (perf record -e cpu-clock --call-graph dwarf -p)";
    fmt::print("\n== --trace {}: {} during each sample, daemon pid {}; timings above are distorted\n", opt.trace, what,
               opt.daemon);
    std::vector<std::string> order;
    for (auto &t : traces)
        if (std::find(order.begin(), order.end(), t.workload) == order.end()) order.push_back(t.workload);
    for (auto &wl : order) {
        const TraceResult *tp = nullptr, *tt = nullptr;
        for (auto &t : traces)
            if (t.workload == wl) (t.cfg == T ? tt : tp) = &t;
        if (opt.trace == "perf") {
            for (auto *t : {tp, tt})
                if (t) fmt::print("\n-- {} on {} ({} files) --\n{}", wl, kCfgName[t->cfg], t->files, t->text);
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
        fmt::print("\n-- {} ({} files): {} per file --\n", wl, files, opt.trace == "strace" ? "syscalls" : "requests");
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
    auto ratio = [](double a, double b) { return a > 0 && b > 0 ? fmt::format("{:.2f}x", a / b) : std::string("-"); };
    auto secs = [](double v) { return v >= 0 ? fmt::format("{:.3f}", v) : std::string("-"); };

    std::vector<std::string> wls;
    for (auto &s : samples)
        if (s.workload != "abort" && std::find(wls.begin(), wls.end(), s.workload) == wls.end()) wls.push_back(s.workload);
    // write-* first, then overwrite-*, then tar
    std::stable_sort(wls.begin(), wls.end(), [](const std::string &a, const std::string &b) {
        auto rank = [](const std::string &w) { return w.rfind("write", 0) == 0 ? 0 : w.rfind("overwrite", 0) == 0 ? 1 : 2; };
        return rank(a) < rank(b);
    });

    fmt::print("\n");
    fmt::print("txnfs-txnbench: median of {} repetitions; configurations alternate order each repetition\n", opt.reps);
    for (Cfg c : cfgs) fmt::print("  {}  ({})\n", kCfgTitle[c], c == X ? opt.xfs_dir : opt.mount);
    fmt::print("  scale: write/overwrite: {} files of each of {} bytes per sample; tar: {} files ({} bytes, mean {:.1f} KiB,\n"
               "         median {:.1f} KiB, max {:.0f} KiB, {} empty) in {} directories (depth <= {}), tarball {} MiB,\n"
               "         seed {}; rss: {} operations in one transaction\n",
               opt.files, opt.sizes, tree.files, tree.bytes, tree.files ? tree.bytes / 1024.0 / tree.files : 0.0,
               tree.median / 1024.0, tree.max / 1024.0, tree.empty, tree.dirs, tree.max_depth, tar_bytes >> 20,
               opt.tree.seed, opt.rss_ops);
    fmt::print("  caches: WARM. Nothing is dropped: the tarball is read from the page cache, overwrite follows write\n"
               "          on the same files; before every sample an untimed sync() runs and the bench waits until the\n"
               "          daemon has no open transaction and no undo log left to discard (equal starting states).\n");
    fmt::print("  measured: wall clock of the workload only. T includes txnfs_begin and the commit (syncfs of the\n"
               "          store + commit record) - durability that X and P do not pay; 'sync after' shows what a\n"
               "          syncfs right after the sample costs each side (untimed context). tar = spawn of\n"
               "          `tar -xf` (T: `txnfs run MOUNT -- tar -xf`) until it exits; T's commit = tar's exit\n"
               "          (a timestamp the wrapper `txnfs-txnbench stamp` takes) until `txnfs run` exits.\n\n");

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
            line += fmt::format(" {:>6} {:>6} {:>6}", ratio(med(wl, T, &Sample::secs), med(wl, P, &Sample::secs)),
                                "<=1.3x", ok ? "ok" : "MISSED");
        }
        if (has(P) && has(L)) {
            double r = med(wl, L, &Sample::secs) / med(wl, P, &Sample::secs);
            bool is_write = wl.rfind("write", 0) == 0;  // the T-lazy target covers the write rows
            line += fmt::format(" {:>6} {:>7} {:>6}", ratio(med(wl, L, &Sample::secs), med(wl, P, &Sample::secs)),
                                is_write ? "<=1.15x" : "", !is_write ? "" : r <= 1.15 ? "ok" : "MISSED");
        }
        if (has(X) && has(T)) line += fmt::format(" {:>8}", ratio(med(wl, T, &Sample::secs), med(wl, X, &Sample::secs)));
        if (has(X) && has(P)) line += fmt::format(" {:>8}", ratio(med(wl, P, &Sample::secs), med(wl, X, &Sample::secs)));
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
                           opt.tree_from.empty() ? " (a generated tree; the targets are for a package's files)"
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
    bool have_abort = std::any_of(samples.begin(), samples.end(), [](auto &s) { return s.workload == "abort"; });
    if (have_abort) {
        double ex = med("abort", T, &Sample::extract), ab = med("abort", T, &Sample::abort);
        abort_ok = ex > 0 && ab / ex <= 0.5;
        fmt::print("\nabort of the extraction (T only): `txnfs run --abort MOUNT -- stamp -- tar -xf ...`\n");
        fmt::print("  extraction  (txnfs run starts -> tar exits)          {:>8} s\n", secs(ex));
        fmt::print("  abort       (tar exits -> txnfs run --abort exits)   {:>8} s   (undo of {:.0f} steps, {:.0f} operations)\n",
                   secs(ab), med_u("abort", T, &Sample::undo_steps), med_u("abort", T, &Sample::txn_ops));
        fmt::print("  abort/extract = {}   target <= 0.5x   {}\n", ratio(ab, ex), abort_ok ? "ok" : "MISSED");
        if (med("tar", T, &Sample::secs) > 0)
            fmt::print("  (the committed extraction on T: {} s, of which commit {} s)\n", secs(med("tar", T, &Sample::secs)),
                       secs(med("tar", T, &Sample::commit)));
        fmt::print("  the abort window also holds the exit of the wrapper and tar's parent, txnfs_info, and the\n"
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
            line += fmt::format(" {:>10}", ps > 0 ? ratio(med(wl, T, &Sample::secs), ps + pb) : std::string("-"));
        }
        if (has(P)) {
            double v = med(wl, P, &Sample::daemon_cpu);
            line += fmt::format(" {:>8}", med(wl, P, &Sample::secs) >= 0 ? fmt::format("{:.2f}", v) : std::string("-"));
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
    fmt::print("  X+sync/P+sync/T+sync = the sample plus an untimed syncfs of the image right after it;\n"
               "  cpu = daemon user+system CPU during the sample; T ops = the daemon's operation count of the\n"
               "  transaction; undo = undo steps in its log (records in STORE/.txnfs/backups/<id>/) before the\n"
               "  commit/abort; backup = bytes the log backed up (cloned); RSS after = the daemon's largest VmRSS\n"
               "  right after a sample of this workload (any configuration; the daemon was at {:.0f} MiB when the run began).\n",
               start_rss_kib / 1024.0);

    bool rss_ok = true;
    if (rss.done) {
        rss_ok = rss.hwm_kib <= 100 * 1024 && rss.peak_rss_kib <= 100 * 1024;
        fmt::print("\ndaemon memory during one {}-operation transaction (T, thread-bound):\n", rss.ops);
        fmt::print("  work: {} new files (create + 1 KiB write + chmod), {} 1 KiB overwrites of {} existing 64 KiB files\n"
                   "        (a new 4 KiB block each time), {} chmods; {} undo steps, {} log objects, {:.1f} MiB backed up\n",
                   rss.created, rss.overwrites, opt.rss_existing, rss.setattrs, rss.steps, rss.objects,
                   static_cast<double>(rss.backup) / 1048576.0);
        fmt::print("  time: {:.2f} s in all ({:.1f} us per operation), commit {:.2f} s\n", rss.secs,
                   rss.ops ? rss.secs / static_cast<double>(rss.ops) * 1e6 : 0.0, rss.commit);
        fmt::print("  RSS before {:.1f} MiB; peak VmRSS sampled every 100 ms {:.1f} MiB ({} samples); VmHWM {} {:.1f} MiB;\n"
                   "  after commit {:.1f} MiB; open fds peak {}, threads peak {} (at the start of the run: {:.1f} MiB,\n"
                   "  {} threads).   target <= 100 MB   {}\n",
                   rss.base_kib / 1024.0, rss.peak_rss_kib / 1024.0, rss.samples,
                   rss.hwm_reset ? "(reset at begin)" : "(NOT reset: since daemon start)", rss.hwm_kib / 1024.0,
                   rss.after_kib / 1024.0, rss.fds_peak, rss.threads_peak, start_rss_kib / 1024.0, start_threads,
                   rss_ok ? "ok" : "MISSED");
    }

    fmt::print("\ntargets: T/P <= 1.3x on every workload: {}; abort/extract <= 0.5x: {}; daemon RSS <= 100 MB: {}\n",
               all_ok ? "met" : "NOT met", have_abort ? (abort_ok ? "met" : "NOT met") : "not measured",
               rss.done ? (rss_ok ? "met" : "NOT met") : "not measured");
    print_traces();
}

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
    if (access(b.backups.c_str(), R_OK) != 0) sys_fail("cannot read the undo-log directory", b.backups);
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
        b.csv = open_csv(opt.csv, "run_id,unix_time,workload,config,rep,order,files,bytes,seconds,commit_seconds,"
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

int main(int argc, char **argv) {
    if (argc >= 2 && std::string(argv[1]) == "stamp") return stamp_main(argc, argv);

    Options opt;
    CLI::App app{"txnfs-txnbench: a transaction vs. no transaction vs. raw XFS, side by side (see bench/README.md)"};
    app.require_subcommand(1);
    auto *run = app.add_subcommand("run", "run the benchmark (bench/txn-vs-plain sets it up)");
    run->add_option("--xfs", opt.xfs_dir, "X: a directory on the XFS image, outside the store")->required();
    run->add_option("--mount", opt.mount, "P and T: the txnfs mount point")->required();
    run->add_option("--store", opt.store, "the store behind the mount (its .txnfs/backups is watched)")->required();
    run->add_option("--work", opt.work, "scratch directory outside the mount (tarball, timestamps, traces)")->required();
    run->add_option("--daemon-pid", opt.daemon, "PID of the txnfs daemon (CPU and RSS, --trace)");
    run->add_option("--txnfs", opt.txnfs, "the txnfs CLI (default: ../src/txnfuse/txnfs next to this program)");
    run->add_option("--reps", opt.reps, "repetitions (median is reported)")->check(CLI::PositiveNumber)->capture_default_str();
    run->add_option("--files", opt.files, "files per write/overwrite sample")->check(CLI::PositiveNumber)->capture_default_str();
    run->add_option("--sizes", opt.sizes, "file sizes for write/overwrite")->capture_default_str();
    run->add_option("--workloads", opt.workloads, "subset of write,overwrite,tar,rm,abort,rss (rm: rm -rf of each extraction)")->capture_default_str();
    run->add_option("--configs", opt.configs, "subset of X,P,T,L (L: T committed lazily)")->capture_default_str();
    run->add_option("--tree-files", opt.tree.files, "files in the generated tree")->check(CLI::PositiveNumber)->capture_default_str();
    run->add_option("--tree-dirs", opt.tree.dirs, "directories in the generated tree")->check(CLI::PositiveNumber)->capture_default_str();
    run->add_option("--tree-mean-kib", opt.tree.mean_kib, "mean file size of the tree, KiB")->capture_default_str();
    run->add_option("--seed", opt.tree.seed, "seed of the generated tree")->capture_default_str();
    run->add_option("--tree-from", opt.tree_from,
                    "tar and rm: extract this directory's tree (e.g. a package's files) instead of a generated one");
    run->add_option("--rss-ops", opt.rss_ops, "operations in the RSS transaction (0: skip)")->capture_default_str();
    run->add_option("--rss-new", opt.rss_new, "at most this many new files in it")->capture_default_str();
    run->add_option("--rss-existing", opt.rss_existing, "existing 64 KiB files it overwrites and chmods")->capture_default_str();
    run->add_option("--csv", opt.csv, "append raw per-sample rows to FILE");
    run->add_option("--trace", opt.trace, "during every P and T sample: count the daemon's syscalls (strace), the "
                                          "FUSE requests by opcode (fuse), or sample the daemon's CPU (perf); "
                                          "prints per-file summaries, distorts timings")
        ->check(CLI::IsMember({"strace", "fuse", "perf"}));
    run->add_flag("-v,--verbose", opt.verbose, "print every sample to stderr");

    TreeSpec gspec;
    std::string gout;
    auto *gen = app.add_subcommand("gen-tree", "write the generated source tree into a new directory");
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
            fmt::print("{}: {} files ({} bytes, mean {:.1f} KiB, median {:.1f} KiB, max {:.0f} KiB, {} empty), {} directories, "
                       "depth <= {}\n",
                       gout, st.files, st.bytes, st.bytes / 1024.0 / std::max<uint64_t>(st.files, 1), st.median / 1024.0,
                       st.max / 1024.0, st.empty, st.dirs, st.max_depth);
            return 0;
        }
        return run_main(opt);
    });
}
