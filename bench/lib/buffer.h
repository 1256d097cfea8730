// The data the benchmarks write: page-aligned buffers filled with a pattern that has
// no zeroes and no repeats, so that no layer can take a shortcut (holes, compression,
// deduplication) on one side of a comparison and not on the other.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

namespace bench {

struct FreeDeleter {
  // Frees what aligned_buffer() allocated.
  void operator()(char *p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<char, FreeDeleter>;

// A buffer of N bytes aligned to 4096 (N a multiple of 4096); throws std::bad_alloc.
AlignedBuffer aligned_buffer(size_t n);

// xorshift64: a stream of 8-byte words; fills continue the stream where the last ended.
class Pattern {
 public:
  explicit Pattern(uint64_t seed) : x_(seed | 1) {}

  // Fills the whole 8-byte words of P[0, N) with the next words of the stream (a tail
  // of N % 8 bytes is left as it is).
  void fill(char *p, size_t n);

 private:
  uint64_t x_;  // never 0: 0 is xorshift's fixed point
};

}  // namespace bench
