#include "bench/txnbench/tracer.h"

#include <fmt/core.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include <unistd.h>

#include "bench/lib/clock.h"
#include "bench/txnbench/process.h"

namespace txnbench {

using namespace bench;

namespace fsys = std::filesystem;

Tracer::~Tracer() {  // interrupted or failed mid-sample: do not leave the tracer running
  if (pid > 0) interrupt_child(pid);
}

bool Tracer::traced_now() const {
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

void Tracer::start(const std::string &tag) {
  out = fmt::format("{}/{}.{}", dir, tag, kind == "strace" ? "strace" : "perf.data");
  std::vector<std::string> argv;
  if (kind == "strace") argv = {"strace", "-c", "-f", "-o", out, "-p", std::to_string(daemon)};
  else if (kind == "fuse")
    argv = {"perf", "record", "-q", "-a", "-m", "16M", "-e", "fuse:fuse_request_send", "-o", out};
  else
    argv = {"perf",
            "record",
            "-q",
            "-F",
            "999",
            "-e",
            "cpu-clock",
            "--call-graph",
            "dwarf,8192",
            "-o",
            out,
            "-p",
            std::to_string(daemon)};
  pid = spawn(argv, "", out + ".log");
  if (kind == "strace") {
    double t0 = now_mono();
    while (!traced_now() && now_mono() - t0 < 10) usleep(20000);
  }
  usleep(kind == "strace" ? 300000 : 1000000);  // let perf attach / strace settle
}

TraceResult Tracer::stop(const std::string &workload, Cfg cfg, uint64_t files) {
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
      if (only && l.find(" txnfs ") == std::string::npos &&
          l.find("libsqlite3") == std::string::npos)
        continue;
      res += l + "\n";
      if (++n >= max) break;
    }
    return res;
  };
  r.text = "by dso (self):\n" + keep(rep1, 12, false) +
           "heaviest call chains (children = inclusive):\n" + keep(rep2, 16, false) +
           "heaviest in the daemon and SQLite (inclusive):\n" + keep(rep2, 30, true);
  return r;
}

}  // namespace txnbench
