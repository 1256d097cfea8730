// Errors of a benchmark run: every failure is an exception that unwinds to main(),
// which reports it on stderr after the program's cleanup.
#pragma once
#include <string>

namespace bench {

// Throws std::system_error for errno as it is now: "WHAT PATH: <strerror>".
[[noreturn]] void sys_fail(const std::string &what, const std::string &path);

}  // namespace bench
