// What the crash points (crash_point.h) and the fault points (fault_point.h) share: a
// table of named points, looked up by name at compile time, so that a point used in the
// code but missing from its table is a compile error, not a point no test can arm.
#pragma once
#include <cstddef>
#include <string_view>

namespace txnfs {

// Index of the point called `name` in `points` (entries with a `name` member).
template <class Point, size_t N>
consteval int point_index(const Point (&points)[N], std::string_view name) {
  for (size_t k = 0; k < N; k++)
    if (std::string_view(points[k].name) == name) return int(k);
  throw "unknown point: add it to the kPoints table of crash_point.h or fault_point.h";
}

}  // namespace txnfs
