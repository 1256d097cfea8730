#include "bench/txnbench/procfs.h"

#include <fmt/core.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "bench/txnbench/process.h"

namespace txnbench {

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
  return static_cast<double>(std::stoull(f[11]) + std::stoull(f[12])) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace txnbench
