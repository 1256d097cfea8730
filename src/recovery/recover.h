// Crash recovery of a store that is not being served: every transaction with an
// undo log but no durable commit record is rolled back, the logs of committed ones
// are discarded, and the handle table drops rows of objects that no longer exist.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "metadb.h"
#include "store.h"

namespace txnfs {

struct RecoveryReport {
  uint64_t rolled_back = 0, discarded = 0, steps_undone = 0, bytes_restored = 0;
  std::vector<std::string> problems;
  double seconds = 0;
};

// Caller holds the store lock. Throws Error if the store cannot be recovered.
RecoveryReport recover_store(const StorePaths &paths, MetaDb &db);

}  // namespace txnfs
