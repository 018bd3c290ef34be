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

}  // namespace gpt2
