#include "bench/txnbench/stamp.h"

#include <fmt/core.h>

#include <cerrno>
#include <cstdio>
#include <tuple>

#include <sys/wait.h>
#include <unistd.h>

#include "bench/lib/clock.h"
#include "bench/txnbench/helpers.h"
#include "bench/txnbench/undo_log.h"

namespace txnbench {

using namespace bench;

void write_stamp(const std::string &path, const Stamp &s) {
  FILE *f = fopen(path.c_str(), "w");
  if (!f) return;
  fprintf(f, "%.9f %.9f %llu %llu %d\n", s.t_exit, s.t_counted, s.steps, s.objects, s.status);
  fclose(f);
}

Stamp read_stamp(const std::string &path) {
  Stamp s;
  FILE *f = fopen(path.c_str(), "r");
  const bool ok = f && fscanf(f, "%lf %lf %llu %llu %d", &s.t_exit, &s.t_counted, &s.steps,
                              &s.objects, &s.status) == 5;
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

}  // namespace txnbench
