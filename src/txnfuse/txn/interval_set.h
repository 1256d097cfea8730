// A set of disjoint half-open byte ranges [start, end): which parts of a file a
// transaction has already backed up.
#pragma once
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace txnfs {

class IntervalSet {
 public:
  // The parts of [start, end) not yet in the set, in order.
  std::vector<std::pair<uint64_t, uint64_t>> missing(uint64_t start, uint64_t end) const {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    uint64_t pos = start;
    auto it = m_.upper_bound(start);
    if (it != m_.begin()) --it;
    for (; it != m_.end() && it->first < end && pos < end; ++it) {
      if (it->second <= pos) continue;
      if (it->first > pos) out.push_back({pos, it->first});
      pos = std::max(pos, it->second);
    }
    if (pos < end) out.push_back({pos, end});
    return out;
  }

  void add(uint64_t start, uint64_t end) {
    if (start >= end) return;
    auto it = m_.upper_bound(start);
    if (it != m_.begin() && std::prev(it)->second >= start) --it;
    while (it != m_.end() && it->first <= end) {
      start = std::min(start, it->first);
      end = std::max(end, it->second);
      it = m_.erase(it);
    }
    m_.emplace(start, end);
  }

 private:
  std::map<uint64_t, uint64_t> m_;  // start -> end
};

}  // namespace txnfs
