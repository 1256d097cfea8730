#include "bench/lib/buffer.h"

#include <cstring>
#include <new>

namespace bench {

AlignedBuffer aligned_buffer(size_t n) {
  AlignedBuffer b(static_cast<char *>(std::aligned_alloc(4096, n)));
  if (!b) throw std::bad_alloc();
  return b;
}

void Pattern::fill(char *p, size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8) {
    x_ ^= x_ << 13;
    x_ ^= x_ >> 7;
    x_ ^= x_ << 17;
    std::memcpy(p + i, &x_, 8);
  }
}

}  // namespace bench
