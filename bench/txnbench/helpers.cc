#include "bench/txnbench/helpers.h"

#include <fmt/core.h>

#include <stdexcept>

namespace txnbench {

[[noreturn]] void fail(const std::string &msg) { throw std::runtime_error(msg); }

std::string human_bytes(uint64_t b) {
  if (b >= (uint64_t(1) << 30) && b % (uint64_t(1) << 30) == 0) return fmt::format("{}G", b >> 30);
  if (b >= (uint64_t(1) << 20) && b % (uint64_t(1) << 20) == 0) return fmt::format("{}M", b >> 20);
  if (b >= 1024 && b % 1024 == 0) return fmt::format("{}K", b >> 10);
  return fmt::format("{}", b);
}

uint64_t parse_size(const std::string &s) {
  if (s.empty()) fail("empty size");
  size_t pos = 0;
  uint64_t v = std::stoull(s, &pos);
  std::string suf = s.substr(pos);
  if (suf.empty() || suf == "B") return v;
  if (suf == "K" || suf == "k" || suf == "KiB") return v << 10;
  if (suf == "M" || suf == "MiB") return v << 20;
  if (suf == "G" || suf == "GiB") return v << 30;
  fail("bad size '" + s + "' (use e.g. 1K, 64K, 1M)");
}

}  // namespace txnbench
