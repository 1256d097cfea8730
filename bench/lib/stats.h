// Repetitions: the order in which the sides of a comparison run in each repetition,
// and the summary of a side's samples (median and spread).
#pragma once
#include <cstddef>
#include <vector>

namespace bench {

// The indices 0..N-1 in the order repetition REP runs the N sides: as given on even
// repetitions, reversed on odd ones, so that no side is always first (warm-up, the
// writeback of the side before).
std::vector<size_t> rep_order(size_t n, int rep);

// The median of V (the mean of the two middle values for an even count); 0 for none.
double median(std::vector<double> v);

// (max - min) / median of V: how far the repetitions are apart; 0 for no samples or a
// median <= 0.
double spread(const std::vector<double> &v);

}  // namespace bench
