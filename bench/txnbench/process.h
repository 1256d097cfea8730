// Child processes of txnfs-txnbench (tar, rm, txnfs run, the tracers): starting one,
// waiting for it, stopping it, and reading what it wrote.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace txnbench {

// Starts ARGV (PATH lookup) with stdout/stderr to files ("" = inherit); returns its pid.
pid_t spawn(const std::vector<std::string> &argv, const std::string &out, const std::string &err);

// Runs ARGV as spawn() starts it; returns its wait status.
int run_wait(const std::vector<std::string> &argv, const std::string &out = "",
             const std::string &err = "");

// Sends SIGINT to the child PID (a tracer: it writes its results then) and waits until it has exited.
void interrupt_child(pid_t pid);

// A wait status in words: "exit status N", "signal N".
std::string describe_status(int st);

// The contents of the file P ("" when it cannot be read).
std::string read_file(const std::string &p);

// The last N lines of TEXT, each as "  | LINE\n" (the tail of a child's stderr in an error).
std::string last_lines(const std::string &text, int n);

}  // namespace txnbench
