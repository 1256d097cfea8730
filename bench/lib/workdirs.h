// The work directories of a benchmark run. Each sample makes a fresh one and removes it
// when done; whatever a failure or an interrupt leaves behind is removed at the end of
// the run. Invariant: every directory this object made and has not removed is listed.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace bench {

class WorkDirs {
 public:
  // PROG names the program in cleanup warnings ("fsbench", "txnbench").
  explicit WorkDirs(std::string prog) : prog_(std::move(prog)) {}

  // Creates the directory PATH (mode 0755; it must not exist) and lists it; returns PATH.
  std::string make(const std::string &path);

  // Removes PATH and everything below it, then forgets it; throws when it cannot.
  void remove(const std::string &path);

  // Removes every listed directory, the newest first; failures are warnings on stderr.
  void remove_left();

 private:
  std::string prog_;
  std::vector<std::string> dirs_;  // in the order they were made
};

}  // namespace bench
