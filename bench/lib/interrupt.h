// Interruption of a benchmark run: SIGINT, SIGTERM and SIGHUP only set a flag; long
// loops poll it and unwind by throwing Interrupted, so that every program removes what
// it created on the way out.
#pragma once
#include <atomic>
#include <stdexcept>

namespace bench {

// Set (never cleared) by the handlers install_interrupt_handlers() installs.
inline std::atomic<bool> g_interrupted{false};

// What check_interrupt() throws; main() catches it and exits with status 130.
struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted") {}
};

// Makes SIGINT, SIGTERM and SIGHUP set g_interrupted instead of ending the process.
void install_interrupt_handlers();

// Throws Interrupted once a handled signal has arrived. Inline: timed loops call it
// once per operation.
inline void check_interrupt() {
  if (g_interrupted.load(std::memory_order_relaxed)) throw Interrupted();
}

}  // namespace bench
