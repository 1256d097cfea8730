// Running the command of `txnfs run`: starting it, waiting for it while passing on the
// signals meant for it, and saying how it ended.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace txnfs::cli {

// How spawn_and_wait() went. If sys_errno is set, no command was started and the other
// fields are 0. If exec_errno is set, the command was not run and wait_status is that of
// the child that failed to exec it (exit status 126 or 127, see exit_status.h).
struct RunResult {
  int exec_errno = 0;   // the command could not be executed (errno of execvp)
  int wait_status = 0;  // waitpid() status otherwise
  int sys_errno = 0;    // pipe/fork failed
  int prepare_errno = 0;  // the child's preparation failed (the command was not run)
};

// Forks, execs COMMAND (PATH lookup; COMMAND must not be empty) in the child, and waits
// for it, forwarding SIGINT, SIGTERM and SIGHUP (unless our caller made us ignore them).
// The forwarding handlers stay installed afterwards, so a late ^C cannot kill txnfs
// between the command's end and the commit or abort. SIGCHLD is left at SIG_DFL.
//
// The child stays in our process group and starts with our caller's signal mask and
// dispositions of the forwarded signals. A signal is forwarded only while the child is
// not yet reaped, so it never reaches a recycled pid. The child being waited for is one
// process-wide variable: one call at a time per process (txnfs is single-threaded here).
// `prepare`, if given, runs in the child before the exec: a non-zero errno it returns is
// reported as prepare_errno (the command is not run).
RunResult spawn_and_wait(const std::vector<std::string> &command,
                         const std::function<int()> &prepare = nullptr);

// waitpid() status -> the exit status of `txnfs run` (128+N for signal N).
int exit_status_of(int wait_status);
// "exited with status 3", "killed by SIGKILL", "killed by SIGSEGV, core dumped".
std::string describe_wait_status(int wait_status);

}  // namespace txnfs::cli
