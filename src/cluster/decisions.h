// The commit decisions of global transactions: key /txnfs/<cluster>/decisions/<gid>,
// value `commit` or `abort`.
//
// Invariant: a decision is created once, by compare-and-swap (create_revision == 0), and
// never changed or removed by this code: once etcd has one, every reader of the gid sees
// the same decision (reads are linearizable). No decision means none has been made yet;
// a participant that gives up waiting writes `abort` the same way (presumed abort), and
// whoever loses the race follows the decision that exists.
#pragma once
#include <string>

#include "cluster/etcd.h"

namespace txnfs::cluster {

enum class Decision { kNone, kCommit, kAbort };
const char *name(Decision d);  // "none" "commit" "abort"

class Decisions {
 public:
  Decisions(Etcd &etcd, std::string cluster);

  // The decision for gid (kNone: none yet). EINVAL: gid not valid_gid; EIO: the key
  // holds something else than `commit` or `abort`.
  int read(const std::string &gid, Decision *out, std::string *why);
  // Writes `want` (kCommit or kAbort) by compare-and-swap unless a decision exists;
  // *final is the decision that exists afterwards (want, or the earlier one).
  int decide(const std::string &gid, Decision want, Decision *final, std::string *why);

  std::string key(const std::string &gid) const { return prefix_ + gid; }

 private:
  Etcd &etcd_;
  const std::string prefix_;  // "/txnfs/<cluster>/decisions/"
};

}  // namespace txnfs::cluster
