// Statistics over repeated measurements: the one median of the code base
// (benchmarks, the harness's reports, the MFU ceiling). Not a statistics
// library: order statistics of a handful of timings, nothing more.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

namespace gpt2 {

struct Summary {
  size_t n = 0;
  double median = 0, min = 0, max = 0;
};

// Median of v: the middle value, or the mean of the two middle values for an
// even count. Throws std::invalid_argument for an empty v.
double median(std::vector<double> v);

// Count, median, min and max; nullopt for an empty v.
std::optional<Summary> summarize(std::vector<double> v);

// The Mann-Whitney U test of two samples (two-sided), as google/benchmark's
// compare.py applies it to repetitions: U of `a` (the pairs (x in a, y in b)
// with x > y, ties counting 1/2) and the p-value of "both come from one
// distribution". Exact (the U distribution counted) when there are no ties
// and both samples hold at most 50 values; else the normal approximation with
// tie and continuity corrections. Throws std::invalid_argument for an empty sample.
struct UTest {
  double u = 0, p = 1;
  bool exact = false;
};
UTest mann_whitney_u(const std::vector<double>& a, const std::vector<double>& b);
// compare.py's bounds: fewer than 2 repetitions on a side, no test; fewer than
// 9, a warning that the result is unreliable.
inline constexpr size_t kUTestMinRepetitions = 2;
inline constexpr size_t kUTestOptimalRepetitions = 9;

}  // namespace gpt2
