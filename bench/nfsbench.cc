// txnfs-nfsbench — one NFS workload through txnfs-nfs COMPOUNDs, timed; one JSON line out.
//
// Drives one server (the harness bench/nfs-bench runs it against each configuration in
// turn and computes the ratios). Workloads:
//   write    CLIENTS processes each write FILES files of SIZE bytes (create/truncate,
//            write, close), PER files per COMPOUND (0: as many as fit the session's
//            maximum request, 1 MiB with contrib/ganesha.conf); with --shared-pct P,
//            P% of each client's files are names every client writes (conflicts).
//   read     the files `write` made, read back, as many per COMPOUND as fit the
//            maximum response.
//   tree     a source-like tree (--files files over --dirs directories, sizes drawn
//            around --size), created through COMPOUNDs (mkdirs, then files).
//   list     READDIR + GETATTR of every entry of that tree, a directory per COMPOUND.
//   remove   the tree removed, files then directories, as many per COMPOUND as fit.
// --per caps the files per COMPOUND (a server accepting fewer operations gets fewer);
// --max-request / --max-response are what CREATE_SESSION asks for (default 1 MiB; a
// file larger than that needs more, as a file is written or read in one COMPOUND).
// Files live under --dir (created if missing, in an untimed COMPOUND). A COMPOUND that
// fails with NFS4ERR_DELAY (a transaction that lost a conflict) is sent again after a
// short backoff when nothing of it can have been applied: the run counts these retries.
// Any other failure ends the run with exit status 1 and the failing operation.
//
// Output: {"workload":..,"clients":..,"files":..,"bytes":..,"compounds":..,
//          "retries":..,"seconds":..,"files_per_compound":..}
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/lib/clock.h"
#include "bench/lib/interrupt.h"
#include "compound_bridge/client/nfs_client.h"

namespace {

namespace nfs = txnfs::nfs;

struct Options {
  std::string workload = "write";
  std::string server = "127.0.0.1";
  uint16_t port = 2049;
  std::string export_path = "/";
  std::string dir = "/bench";
  std::string tag = "plain";
  uint32_t files = 1000;
  uint64_t size = 4096;
  uint32_t per = 0;
  uint32_t clients = 1;
  uint32_t shared_pct = 0;
  uint32_t dirs = 70;
  bool stable = false;
  uint32_t max_retries = 1000;
  uint32_t max_ops = 16384;        // what the server really accepts (it may grant more)
  uint32_t max_request = 1 << 20;  // what CREATE_SESSION asks for
  uint32_t max_response = 1 << 20;
};

struct Tally {
  uint64_t files = 0, bytes = 0, compounds = 0, retries = 0;
};

[[noreturn]] void fail(const std::string &msg) {
  fmt::print(stderr, "txnfs-nfsbench: {}\n", msg);
  std::exit(1);
}

nfs::ClientOptions client_options(const Options &o) {
  nfs::ClientOptions c;
  c.server = o.server;
  c.port = o.port;
  c.export_path = o.export_path;
  c.max_operations = o.max_ops;
  c.max_request = o.max_request;
  c.max_response = o.max_response;
  return c;
}

// Deterministic content, different per file.
std::string content(uint64_t size, uint64_t seed) {
  std::string s(size, '\0');
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  for (size_t i = 0; i < size; i += 8) {
    uint64_t v = rng();
    for (size_t j = 0; j < 8 && i + j < size; ++j) s[i + j] = char(v >> (8 * j));
  }
  return s;
}

// Sends `c` until it succeeds, retrying NFS4ERR_DELAY when nothing can have applied.
void execute(nfs::Compound &c, const Options &o, Tally &t, const char *what) {
  for (uint32_t attempt = 0;; ++attempt) {
    nfs::CompoundResult r = c.execute(o.tag);
    t.compounds++;
    if (r.ok()) return;
    if (!r.delay_retry_safe() || attempt >= o.max_retries)
      fail(fmt::format("{}: COMPOUND failed with {} at {}", what, nfs::status_name(r.status),
                       r.failed_at));
    t.retries++;
    usleep(1000u * std::min<uint32_t>(50, 1u << std::min<uint32_t>(attempt, 5)));
  }
}

// How many operations of the kind `add` makes fit one COMPOUND (at least 1): measured
// from one and two operations, then checked against the exact size.
template <typename Add>
size_t fitting(nfs::Client &cl, const Options &o, size_t want, Add add) {
  nfs::Compound one(cl), two(cl);
  add(one, 0);
  add(two, 0);
  add(two, 1);
  size_t base = one.request_bytes(o.tag), per = two.request_bytes(o.tag) - base;
  size_t limit = cl.limits().max_request;
  size_t n = base > limit ? 1 : 1 + (limit - base) / std::max<size_t>(per, 1);
  size_t per_ops = two.nfs_ops() - one.nfs_ops();
  if (per_ops) n = std::min(n, 1 + (cl.limits().max_operations - one.nfs_ops()) / per_ops);
  n = std::min(n, want);
  while (n > 1) {
    nfs::Compound probe(cl);
    for (size_t i = 0; i < n; ++i) add(probe, i);
    if (probe.fit(o.tag).fits) break;
    n = n * 9 / 10;
  }
  return std::max<size_t>(n, 1);
}

// Sends ADD(c, i) for i in [0, n), in order, PER at a time (fewer when a COMPOUND of
// PER does not fit: the items are not all the same size).
template <typename Add>
void send_chunked(nfs::Client &cl, const Options &o, Tally &t, size_t n, size_t per, Add add,
                  const char *what) {
  size_t i = 0;
  while (i < n) {
    bench::check_interrupt();
    size_t k = std::min(std::max<size_t>(per, 1), n - i);
    for (;;) {
      nfs::Compound c(cl);
      for (size_t j = 0; j < k; ++j) add(c, i + j);
      if (k > 1 && !c.fit(o.tag).fits) {
        k = k * 9 / 10;
        continue;
      }
      execute(c, o, t, what);
      break;
    }
    i += k;
  }
}

std::string file_path(const Options &o, uint32_t client, uint32_t i) {
  // The first shared_pct% of every client's files have common names.
  if (i < uint64_t(o.files) * o.shared_pct / 100) return fmt::format("{}/shared/f{:06}", o.dir, i);
  return fmt::format("{}/c{:03}/f{:06}", o.dir, client, i);
}

void ensure_dirs(nfs::Client &cl, const Options &o, uint32_t client) {
  for (const std::string &d : {o.dir, o.dir + "/shared", fmt::format("{}/c{:03}", o.dir, client)}) {
    nfs::Compound c(cl);
    c.mkdir(d, 0755);
    nfs::CompoundResult r = c.execute("setup");
    if (!r.ok() && r.status != 17 /* NFS4ERR_EXIST */)
      fail(fmt::format("mkdir {}: {}", d, nfs::status_name(r.status)));
  }
}

Tally write_files(nfs::Client &cl, const Options &o, uint32_t client) {
  Tally t;
  std::vector<std::string> paths, data;
  for (uint32_t i = 0; i < o.files; ++i) {
    paths.push_back(file_path(o, client, i));
    data.push_back(content(o.size, uint64_t(client) << 32 | i));
  }
  nfs::WriteOptions wo;
  wo.stable = o.stable;
  // --per is a cap: a server that accepts fewer operations (Debian's Ganesha: 100) gets
  // as many as fit; the JSON's files_per_compound says what was sent.
  size_t per = fitting(cl, o, o.per ? o.per : o.files,
                       [&](nfs::Compound &c, size_t i) { c.write(paths[i], data[i], wo); });
  {
    nfs::Compound one(cl);
    one.write(paths[0], data[0], wo);
    nfs::Fit f = one.fit(o.tag);
    if (!f.fits)
      fail(
          fmt::format("one file of {} bytes does not fit one COMPOUND ({} bytes, the session "
                      "allows {}; raise --max-request)",
                      o.size, f.request_bytes, f.max_request));
  }
  for (size_t i = 0; i < paths.size(); i += per) {
    bench::check_interrupt();
    nfs::Compound c(cl);
    size_t end = std::min(paths.size(), i + per);
    for (size_t j = i; j < end; ++j) c.write(paths[j], data[j], wo);
    execute(c, o, t, "write");
    t.files += end - i;
    t.bytes += (end - i) * o.size;
  }
  return t;
}

Tally read_files(nfs::Client &cl, const Options &o, uint32_t client) {
  Tally t;
  // Replies carry the data: as many files as fit the maximum response.
  // Each file's reply: OPEN, GETATTR, READs, CLOSE results (~400 bytes) plus the data.
  // A file larger than the session's maximum response cannot be read in one COMPOUND
  // (txnfs-nfs reads from offset 0 only): raise --max-response.
  size_t limit = cl.limits().max_response;
  if (o.size + 1024 > limit)
    fail(
        fmt::format("read: a file of {} bytes does not fit the maximum response of {} "
                    "bytes; raise --max-response",
                    o.size, limit));
  size_t fit_n = std::max<size_t>(1, (limit - 512) / (o.size + 400));
  size_t per = o.per ? std::min<size_t>(o.per, fit_n) : fit_n;
  per = std::min<size_t>({per, o.files, std::max<uint32_t>(1, cl.limits().max_operations / 8)});
  for (uint32_t i = 0; i < o.files; i += uint32_t(per)) {
    bench::check_interrupt();
    nfs::Compound c(cl);
    uint32_t end = std::min<uint32_t>(o.files, i + uint32_t(per));
    for (uint32_t j = i; j < end; ++j) c.read(file_path(o, client, j), uint32_t(o.size));
    execute(c, o, t, "read");
    t.files += end - i;
    t.bytes += uint64_t(end - i) * o.size;
  }
  return t;
}

// The source-like tree: `dirs` directories in two levels, `files` files spread over
// them with sizes from an exponential distribution of mean `size` (like source files).
struct Tree {
  std::vector<std::string> dirs;
  std::vector<std::pair<std::string, uint64_t>> files;
};

Tree make_tree(const Options &o) {
  Tree tr;
  std::mt19937_64 rng(7);
  uint32_t top = std::max<uint32_t>(1, uint32_t(std::sqrt(double(o.dirs))));
  for (uint32_t d = 0; d < o.dirs; ++d)
    tr.dirs.push_back(d < top ? fmt::format("{}/src/d{:03}", o.dir, d)
                              : fmt::format("{}/src/d{:03}/s{:04}", o.dir, d % top, d));
  std::exponential_distribution<double> sz(1.0 / double(o.size));
  for (uint32_t f = 0; f < o.files; ++f)
    tr.files.emplace_back(fmt::format("{}/file{:05}.c", tr.dirs[f % tr.dirs.size()], f),
                          std::min<uint64_t>(uint64_t(sz(rng)) + 1, 1 << 20));
  return tr;
}

Tally tree_create(nfs::Client &cl, const Options &o) {
  Tally t;
  Tree tr = make_tree(o);
  {
    std::vector<std::string> dirs = tr.dirs;
    dirs.insert(dirs.begin(), o.dir + "/src");  // parents come first
    size_t per =
        fitting(cl, o, dirs.size(), [&](nfs::Compound &c, size_t i) { c.mkdir(dirs[i], 0755); });
    send_chunked(
        cl, o, t, dirs.size(), per, [&](nfs::Compound &c, size_t i) { c.mkdir(dirs[i], 0755); },
        "mkdir");
  }
  std::string data = content(1 << 20, 99);
  size_t i = 0;
  while (i < tr.files.size()) {
    bench::check_interrupt();
    nfs::Compound c(cl);
    size_t n = 0;
    uint64_t bytes = 0;
    // Greedy: add files while the estimate stays under the limit, then check exactly.
    while (i + n < tr.files.size() &&
           bytes + tr.files[i + n].second + 300 < cl.limits().max_request - 4096 &&
           c.nfs_ops() + 8 < cl.limits().max_operations) {
      auto &[p, s] = tr.files[i + n];
      c.write(p, std::string_view(data).substr(0, s));
      bytes += s + 300;
      ++n;
    }
    if (!c.fit(o.tag).fits) fail("tree: a COMPOUND of files did not fit (estimate too small)");
    execute(c, o, t, "tree");
    t.files += n;
    t.bytes += bytes;
    i += n;
  }
  return t;
}

Tally tree_list(nfs::Client &cl, const Options &o) {
  Tally t;
  Tree tr = make_tree(o);
  std::vector<std::string> dirs = tr.dirs;
  dirs.insert(dirs.begin(), o.dir + "/src");
  for (auto &d : dirs) {
    bench::check_interrupt();
    nfs::Compound c(cl);
    c.readdir(d, 1 << 19);
    nfs::CompoundResult r = c.execute(o.tag);
    t.compounds++;
    if (!r.ok()) fail(fmt::format("readdir {}: {}", d, nfs::status_name(r.status)));
    // GETATTR of every entry, as `ls -l` does.
    if (!r.ops[0].eof) fail(fmt::format("readdir {}: more entries than one READDIR returns", d));
    std::vector<std::string> paths;
    for (auto &n : r.ops[0].names) paths.push_back(d + "/" + n);
    if (!paths.empty()) {
      size_t per =
          fitting(cl, o, paths.size(), [&](nfs::Compound &c, size_t i) { c.getattr(paths[i]); });
      send_chunked(
          cl, o, t, paths.size(), per, [&](nfs::Compound &c, size_t i) { c.getattr(paths[i]); },
          "getattr");
    }
    t.files += paths.size();
  }
  return t;
}

Tally tree_remove(nfs::Client &cl, const Options &o) {
  Tally t;
  Tree tr = make_tree(o);
  size_t per = fitting(cl, o, tr.files.size(),
                       [&](nfs::Compound &c, size_t i) { c.remove(tr.files[i].first); });
  send_chunked(
      cl, o, t, tr.files.size(), per,
      [&](nfs::Compound &c, size_t i) { c.remove(tr.files[i].first); }, "remove");
  t.files += tr.files.size();
  std::vector<std::string> dirs(tr.dirs.rbegin(), tr.dirs.rend());  // children first
  dirs.push_back(o.dir + "/src");
  size_t dper = fitting(cl, o, dirs.size(), [&](nfs::Compound &c, size_t i) { c.remove(dirs[i]); });
  send_chunked(
      cl, o, t, dirs.size(), dper, [&](nfs::Compound &c, size_t i) { c.remove(dirs[i]); }, "rmdir");
  return t;
}

Tally run_client(const Options &o, uint32_t client) {
  nfs::Client cl(client_options(o));
  if (o.workload == "write") return write_files(cl, o, client);
  if (o.workload == "read") return read_files(cl, o, client);
  if (o.workload == "tree") return tree_create(cl, o);
  if (o.workload == "list") return tree_list(cl, o);
  if (o.workload == "remove") return tree_remove(cl, o);
  fail("unknown workload " + o.workload);
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  CLI::App app{"txnfs-nfsbench: one timed NFS workload through txnfs-nfs COMPOUNDs"};
  app.add_option("workload", o.workload, "write | read | tree | list | remove")->required();
  app.add_option("--server", o.server);
  app.add_option("--port", o.port)->required();
  app.add_option("--export", o.export_path, "the export's pseudo path");
  app.add_option("--dir", o.dir, "directory (in the export) the workload uses");
  app.add_option("--tag", o.tag, "COMPOUND tag; \"txn...\" asks for a transaction");
  app.add_option("--files", o.files, "files per client (tree: in all)");
  app.add_option("--size", o.size, "bytes per file (tree: mean)");
  app.add_option("--per", o.per, "files per COMPOUND (0: as many as fit)");
  app.add_option("--clients", o.clients, "concurrent client processes")->check(CLI::Range(1, 64));
  app.add_option("--shared-pct", o.shared_pct, "write: percent of files shared by all clients")
      ->check(CLI::Range(0, 100));
  app.add_option("--dirs", o.dirs, "tree: directories");
  app.add_flag("--stable", o.stable, "FILE_SYNC4 writes");
  app.add_option("--max-retries", o.max_retries,
                 "NFS4ERR_DELAY retries per COMPOUND (default 1000)");
  app.add_option("--max-request", o.max_request,
                 "bytes of a COMPOUND call to ask CREATE_SESSION for (default 1 MiB)");
  app.add_option("--max-response", o.max_response,
                 "bytes of a COMPOUND reply to ask CREATE_SESSION for (default 1 MiB)");
  app.add_option("--max-ops", o.max_ops,
                 "NFS operations per COMPOUND to ask for (unpatched Ganesha 4.3 accepts 100)");
  CLI11_PARSE(app, argc, argv);
  if ((o.workload == "tree" || o.workload == "list" || o.workload == "remove") && o.clients != 1)
    fail("the tree workloads run with one client");

  try {
    for (uint32_t c = 0; c < o.clients; ++c) {
      nfs::Client cl(client_options(o));
      ensure_dirs(cl, o, c);
    }
  } catch (const std::exception &e) {
    fail(e.what());
  }

  // One process per client, started together through a pipe; each reports its tally.
  int go[2], back[2];
  if (pipe(go) != 0 || pipe(back) != 0) fail("pipe failed");
  std::vector<pid_t> kids;
  for (uint32_t c = 0; c < o.clients; ++c) {
    pid_t pid = fork();
    if (pid < 0) fail("fork failed");
    if (pid == 0) {
      close(go[1]);
      char b;
      if (read(go[0], &b, 1) != 1) _exit(1);
      try {
        Tally t = run_client(o, c);
        if (write(back[1], &t, sizeof t) != sizeof t) _exit(1);
        _exit(0);
      } catch (const std::exception &e) {
        fmt::print(stderr, "txnfs-nfsbench: client {}: {}\n", c, e.what());
        _exit(1);
      }
    }
    kids.push_back(pid);
  }
  close(go[0]);
  close(back[1]);
  double t0 = bench::now_mono();
  std::string starts(o.clients, 'g');
  if (write(go[1], starts.data(), starts.size()) != ssize_t(starts.size())) fail("start failed");
  close(go[1]);
  Tally sum;
  int failed = 0;
  for (pid_t k : kids) {
    int st = 0;
    waitpid(k, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) failed++;
  }
  double secs = bench::now_mono() - t0;
  Tally t;
  while (read(back[0], &t, sizeof t) == sizeof t) {
    sum.files += t.files;
    sum.bytes += t.bytes;
    sum.compounds += t.compounds;
    sum.retries += t.retries;
  }
  if (failed) fail(fmt::format("{} of {} clients failed", failed, o.clients));
  fmt::print(
      "{{\"workload\":\"{}\",\"clients\":{},\"files\":{},\"bytes\":{},\"compounds\":{},"
      "\"retries\":{},\"seconds\":{:.6f},\"files_per_compound\":{:.1f}}}\n",
      o.workload, o.clients, sum.files, sum.bytes, sum.compounds, sum.retries, secs,
      sum.compounds ? double(sum.files) / double(sum.compounds) : 0.0);
  return 0;
}
