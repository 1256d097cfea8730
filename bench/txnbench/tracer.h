// ---- --trace: a tracer attached to the daemon around one sample -------------------------
//   strace  `strace -c -f -p DAEMON`: syscalls of the daemon, counted per file
//   fuse    `perf record -a -e fuse:fuse_request_send`: the requests the kernel sent to
//           this mount's FUSE connection, by opcode, per file
//   perf    `perf record -e cpu-clock --call-graph dwarf -p DAEMON`: where its CPU goes
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

#include "bench/txnbench/options.h"

namespace txnbench {

// What a tracer saw during one sample.
struct TraceResult {
  std::string workload;
  Cfg cfg = P;
  uint64_t files = 0;
  std::map<std::string, double> counts;  // syscall or FUSE opcode -> calls
  double total = 0;                      // all calls
  std::string text;                      // perf: the report
};

struct Tracer {
  std::string kind;
  pid_t daemon = 0;
  uint64_t kdev = 0;
  std::string dir;
  pid_t pid = 0;
  std::string out;

  ~Tracer();  // interrupted or failed mid-sample: do not leave the tracer running

  // strace only: every thread of the daemon shows a TracerPid.
  bool traced_now() const;

  // Starts the tracer, its output in DIR/TAG.strace or DIR/TAG.perf.data, and waits
  // until it is attached.
  void start(const std::string &tag);

  // Stops the tracer and reads what it saw during the sample of WORKLOAD on CFG.
  TraceResult stop(const std::string &workload, Cfg cfg, uint64_t files);
};

}  // namespace txnbench
