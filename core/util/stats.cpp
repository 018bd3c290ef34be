#include "util/stats.h"

#include <algorithm>
#include <cmath>
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

UTest mann_whitney_u(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.empty() || b.empty()) throw std::invalid_argument("mann_whitney_u: an empty sample");
  const size_t n1 = a.size(), n2 = b.size();
  UTest t;
  bool ties = false;
  for (double x : a) {
    for (double y : b) {
      if (x > y) t.u += 1;
      if (x == y) {
        t.u += 0.5;
        ties = true;
      }
    }
  }
  std::vector<double> all(a);
  all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  for (size_t i = 1; i < all.size(); ++i) ties = ties || all[i] == all[i - 1];
  const double N = static_cast<double>(n1 * n2);
  if (!ties && n1 <= 50 && n2 <= 50) {
    // count[m][k][u]: orderings of m values of `a` and k of `b` with U = u,
    // by the last value: U(m, k, u) = U(m - 1, k, u - k) + U(m, k - 1, u).
    const size_t U = n1 * n2;
    std::vector<std::vector<std::vector<double>>> count(
        n1 + 1, std::vector<std::vector<double>>(n2 + 1, std::vector<double>(U + 1, 0.0)));
    for (size_t m = 0; m <= n1; ++m) {
      for (size_t k = 0; k <= n2; ++k) {
        if (m == 0 || k == 0) {
          count[m][k][0] = 1;
          continue;
        }
        for (size_t u = 0; u <= m * k; ++u) {
          count[m][k][u] = (u >= k ? count[m - 1][k][u - k] : 0.0) + count[m][k - 1][u];
        }
      }
    }
    double total = 0, below = 0, above = 0;
    const size_t u_obs = static_cast<size_t>(t.u);
    for (size_t u = 0; u <= U; ++u) {
      total += count[n1][n2][u];
      if (u <= u_obs) below += count[n1][n2][u];
      if (u >= u_obs) above += count[n1][n2][u];
    }
    t.p = std::min(1.0, 2.0 * std::min(below, above) / total);
    t.exact = true;
    return t;
  }
  // Normal approximation: mean n1 n2 / 2, variance with the tie correction.
  double tie_term = 0;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j] == all[i]) ++j;
    const double c = static_cast<double>(j - i);
    tie_term += c * c * c - c;
    i = j;
  }
  const double n = static_cast<double>(n1 + n2);
  const double var = N / 12.0 * ((n + 1) - tie_term / (n * (n - 1)));
  if (var <= 0) return t;  // every value equal: p = 1
  const double z = (std::fabs(t.u - N / 2) - 0.5) / std::sqrt(var);
  t.p = std::min(1.0, std::erfc(std::max(z, 0.0) / std::sqrt(2.0)));
  return t;
}

}  // namespace gpt2
