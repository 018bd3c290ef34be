#include "util/stats.h"

#include <algorithm>
#include <stdexcept>

namespace gpt2 {

double median(std::vector<double> v) {
  if (v.empty()) throw std::invalid_argument("median of no values");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::optional<Summary> summarize(std::vector<double> v) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  return Summary{v.size(), median(v), v.front(), v.back()};
}

}  // namespace gpt2
