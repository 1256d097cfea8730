#include "bench/lib/stats.h"

#include <algorithm>

namespace bench {

std::vector<size_t> rep_order(size_t n, int rep) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = rep % 2 == 0 ? i : n - 1 - i;
  return order;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

double spread(const std::vector<double> &v) {
  double m = median(v);
  if (v.empty() || m <= 0) return 0;
  auto [mn, mx] = std::minmax_element(v.begin(), v.end());
  return (*mx - *mn) / m;
}

}  // namespace bench
