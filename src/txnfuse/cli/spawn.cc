// spawn_and_wait(): the command of `txnfs run` as our child, with SIGINT, SIGTERM and
// SIGHUP passed on to it; and the wait-status helpers.
#include "txnfuse/cli/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>

#include <fmt/format.h>

#include "txnfuse/cli/exit_status.h"

namespace txnfs::cli {

namespace {

std::string signal_name(int sig) {
  const char *abbrev = ::sigabbrev_np(sig);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

// The child while spawn_and_wait() waits for it; 0 otherwise. Read by forward_signal().
// It is set and cleared with the forwarded signals blocked, and cleared before the child
// is reaped: while it is nonzero, it names our child and no recycled pid.
volatile sig_atomic_t g_child = 0;
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

void forward_signal(int sig, siginfo_t *si, void *) {
  pid_t child = g_child;
  if (child <= 0) return;
  // A terminal's ^C / ^\ reaches the whole foreground process group (si_code SI_KERNEL):
  // the child, which stays in our group, has it already.
  if (si != nullptr && si->si_code == SI_KERNEL) return;
  int saved = errno;
  ::kill(child, sig);
  errno = saved;
}

}  // namespace

RunResult spawn_and_wait(const std::vector<std::string> &command,
                         const std::function<int()> &prepare) {
  RunResult r;
  std::vector<std::string> args = command;
  std::vector<char *> argv;
  for (auto &a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // Children must be waitable even if our caller left SIGCHLD ignored.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGCHLD, &dfl, nullptr);

  int pfd[2];  // the child reports an exec failure through it; CLOEXEC closes it otherwise
  if (::pipe2(pfd, O_CLOEXEC) < 0) {
    r.sys_errno = errno;
    return r;
  }

  sigset_t fwd, old_mask;
  sigemptyset(&fwd);
  for (int s : kForwarded) sigaddset(&fwd, s);
  ::sigprocmask(SIG_BLOCK, &fwd, &old_mask);
  struct sigaction sa {};
  sa.sa_sigaction = forward_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  struct sigaction old[std::size(kForwarded)];
  for (size_t i = 0; i < std::size(kForwarded); i++) {
    ::sigaction(kForwarded[i], nullptr, &old[i]);
    if (old[i].sa_handler != SIG_IGN)  // an ignored signal stays ignored, for both of us
      ::sigaction(kForwarded[i], &sa, nullptr);
  }

  pid_t pid = ::fork();
  if (pid == 0) {
    for (size_t i = 0; i < std::size(kForwarded); i++)
      ::sigaction(kForwarded[i], &old[i], nullptr);  // also keeps an inherited SIG_IGN
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    ::close(pfd[0]);
    int e = prepare ? prepare() : 0;
    if (e != 0) {
      int report = -e;  // negative: the preparation failed, not the exec
      ssize_t n = ::write(pfd[1], &report, sizeof report);
      (void)n;
      ::_exit(kRunTxnFailed);
    }
    ::execvp(argv[0], argv.data());
    e = errno;
    ssize_t n = ::write(pfd[1], &e, sizeof e);
    (void)n;
    ::_exit(e == ENOENT ? kRunNotFound : kRunCannotExec);
  }
  if (pid < 0) {
    r.sys_errno = errno;
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    ::close(pfd[0]);
    ::close(pfd[1]);
    return r;
  }
  g_child = pid;
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  ::close(pfd[1]);
  int e = 0;
  ssize_t n;
  do n = ::read(pfd[0], &e, sizeof e);
  while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof e) && e < 0) r.prepare_errno = -e;
  else if (n == static_cast<ssize_t>(sizeof e)) r.exec_errno = e;
  ::close(pfd[0]);

  // Wait without reaping first: a signal forwarded now still reaches our child's pid,
  // never a recycled one.
  siginfo_t si;
  while (::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  ::sigprocmask(SIG_BLOCK, &fwd, nullptr);
  g_child = 0;
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.wait_status = status;
  return r;
}

int exit_status_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return kRunTxnFailed;  // not reached: we wait only for termination
}

std::string describe_wait_status(int wait_status) {
  if (WIFEXITED(wait_status)) return fmt::format("exited with status {}", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status))
    return fmt::format("killed by {}{}", signal_name(WTERMSIG(wait_status)),
                       WCOREDUMP(wait_status) ? ", core dumped" : "");
  return fmt::format("ended with wait status {:#x}", static_cast<unsigned>(wait_status));
}

}  // namespace txnfs::cli
