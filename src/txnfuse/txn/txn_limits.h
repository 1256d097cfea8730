// The limits a mount puts on each transaction, and their defaults — the one place
// they are written: the daemon's TxnManager, MountOptions and the CLI's
// --lock-timeout-ms, --max-txn-ops, --max-txn-backup-bytes and --lazy-flush-ms all start
// from these.
#pragma once
#include <chrono>
#include <cstdint>

namespace txnfs {

struct TxnLimits {
  static constexpr uint64_t kDefaultMaxOps = 1'000'000;
  static constexpr uint64_t kDefaultMaxBackupBytes = uint64_t(64) << 30;
  static constexpr std::chrono::milliseconds kDefaultLockTimeout{10'000};
  static constexpr std::chrono::milliseconds kDefaultLazyFlush{5};
  static constexpr std::chrono::milliseconds kMaxLazyFlush{60'000};

  uint64_t max_ops = kDefaultMaxOps;                   // operations per transaction
  uint64_t max_backup_bytes = kDefaultMaxBackupBytes;  // bytes one transaction may back up
  std::chrono::milliseconds lock_timeout = kDefaultLockTimeout;  // longest wait for a lock
  // Longest time a lazily committed transaction stays not durable (unless the store
  // cannot be synced): the flusher makes every lazy commit durable this long after it.
  std::chrono::milliseconds lazy_flush = kDefaultLazyFlush;
};

}  // namespace txnfs
