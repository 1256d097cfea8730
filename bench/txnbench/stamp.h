// stamp: the wrapper that timestamps the exit of tar. `txnfs-txnbench stamp OUT
// COUNT_DIR -- CMD...` runs CMD, takes the CLOCK_MONOTONIC time when it exits, counts
// the undo log of the one open transaction below COUNT_DIR ("-": none) and writes both
// to OUT; the benchmark reads OUT back after the sample.
#pragma once
#include <string>

namespace txnbench {

// What the wrapper writes to its OUT file, one line: "T_EXIT T_COUNTED STEPS OBJECTS STATUS".
struct Stamp {
  double t_exit = 0;  // CLOCK_MONOTONIC when the command exited
  double t_counted =
      0;  // ... and when the undo log was counted (a window left out of every result)
  unsigned long long steps = 0, objects = 0;  // the undo log: symlinks (undo steps), other entries
  int status = 0;                             // the command's wait status
};

// Writes S to PATH; nothing when PATH cannot be opened (read_stamp() then fails).
void write_stamp(const std::string &path, const Stamp &s);

// The Stamp the wrapper wrote to PATH; throws when there is none.
Stamp read_stamp(const std::string &path);

// `txnfs-txnbench stamp OUT COUNT_DIR|- -- CMD [ARGS...]` (ARGV as main() has it): runs
// CMD, writes its Stamp to OUT, and exits as CMD did (128 + the signal that ended it).
int stamp_main(int argc, char **argv);

}  // namespace txnbench
