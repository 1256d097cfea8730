// Errors of a benchmark run: every failure is an exception that unwinds (through the
// program's cleanup) to main(), which reports it and exits with a status saying what
// happened: 1 for an error, 130 for an interrupt.
#pragma once
#include <functional>
#include <string>
#include <string_view>

namespace bench {

// Throws std::system_error for errno as it is now: "WHAT PATH: <strerror>".
[[noreturn]] void sys_fail(const std::string &what, const std::string &path);

// Runs BODY and returns what it returns. Interrupted becomes 130 after the line
// "PROG: ON_INTERRUPT" on stderr, any other exception 1 after "PROG: error: WHAT".
int exit_status_of(std::string_view prog, std::string_view on_interrupt,
                   const std::function<int()> &body);

}  // namespace bench
