#include "bench/txnbench/process.h"

#include <fmt/core.h>

#include <cerrno>
#include <csignal>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include "bench/lib/errors.h"

extern char **environ;

namespace txnbench {

using namespace bench;

pid_t spawn(const std::vector<std::string> &argv, const std::string &out, const std::string &err) {
  std::vector<char *> a;
  for (auto &s : argv) a.push_back(const_cast<char *>(s.c_str()));
  a.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!out.empty())
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!err.empty())
    posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, a[0], &fa, nullptr, a.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    errno = rc;
    sys_fail("cannot run", argv[0]);
  }
  return pid;
}

int run_wait(const std::vector<std::string> &argv, const std::string &out, const std::string &err) {
  pid_t pid = spawn(argv, out, err);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) sys_fail("waitpid", argv[0]);
  }
  return status;
}

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
  for (size_t i = lines.size() > size_t(n) ? lines.size() - n : 0; i < lines.size(); ++i)
    r += "  | " + lines[i] + "\n";
  return r;
}

}  // namespace txnbench
