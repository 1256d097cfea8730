// Small helpers of txnfs-txnbench (the shared ones are in bench/lib): failing with a
// message, and byte counts as the command line spells them ("64K").
#pragma once
#include <cstdint>
#include <string>

namespace txnbench {

// Throws std::runtime_error(MSG): the run stops, cleans up and prints MSG.
[[noreturn]] void fail(const std::string &msg);

// B as "NG", "NM" or "NK" when it is an exact multiple, else the plain byte count.
std::string human_bytes(uint64_t b);

// "1K", "64K", "1M", "2G", "512" (bytes; also "KiB", "MiB", "GiB", "B") -> bytes;
// fail()s on any other suffix.
uint64_t parse_size(const std::string &s);

}  // namespace txnbench
