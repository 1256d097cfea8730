// What `txnfs status` prints: the daemon's status JSON (TXNFS_IOC_STATUS) as a table of
// the open transactions and a line of counters. Pure functions, unit-tested.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace txnfs::cli {

// The human-readable status of a mount from the daemon's JSON: a table with one row per
// open transaction ("no open transactions" if there is none), then "counters: ..." if the
// JSON has counters -- the known ones first in a fixed order, then any others by name.
// A field that is missing or of the wrong type shows as "-". Every line ends in '\n'.
// Throws std::runtime_error if the text is not JSON of the expected shape.
std::string format_status(std::string_view json);

std::string format_age(uint64_t ms);       // 5ms, 1.5s, 3m04s, 2h05m, 3d04h
std::string format_bytes(uint64_t bytes);  // 0, 512B, 4.0K, 1.5M, 2.0G
std::string state_name(unsigned state);    // enum txnfs_state -> "active", ...

}  // namespace txnfs::cli
