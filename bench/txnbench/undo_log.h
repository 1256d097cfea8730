// The undo log of a transaction as the store keeps it (STORE/.txnfs/backups/<id>/),
// read from outside the daemon: txnfs-txnbench counts its records, untimed.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace txnbench {

// A record's name in a log: 16 lower-case hex digits (src/recovery/undo/undo_record.h).
bool is_record_name(std::string_view n);

// Undo steps (records: xattrs "trusted.txnfs.<seq>" of the log directory, and symlinks
// "<seq>" in it) and other entries of the log DIR; {0, 0} if it cannot be read.
std::pair<uint64_t, uint64_t> count_log(const std::string &dir);

// The only subdirectory of BACKUPS (the undo log of the one open transaction), or "".
std::string only_log_dir(const std::string &backups);

}  // namespace txnbench
