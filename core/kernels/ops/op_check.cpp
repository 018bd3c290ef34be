// The reference runs and comparisons of op_check.h.
#include "kernels/ops/op_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpt2::ops {

Expected run_reference(const OpSpec& spec, const OpShape& shape) {
  std::unique_ptr<OpCase> c = spec.make(shape, host_memory());
  c->reset();
  c->run(*make_reference_backend());
  return {c->outputs(), c->tolerances()};
}

std::vector<OpOutput> run_on(const OpSpec& spec, const OpShape& shape, Backend& be, bool in_place) {
  std::unique_ptr<OpCase> c = spec.make(shape, be.memory());
  c->reset();
  if (in_place) {
    if (!c->run_in_place(be)) return {};
  } else {
    c->run(be);
  }
  be.synchronize();
  return c->outputs();
}

Tolerance tolerance_on(Backend& be, const Tolerance& t, const OpOutput& expected) {
  if (be.memory().is_host()) return t;
  double scale = 0;
  for (size_t i = 0; i < expected.size(); ++i) scale = std::max(scale, std::fabs(expected.at(i)));
  return device_tolerance(t, scale);
}

std::string compare(const OpOutput& actual, const OpOutput& expected, const Tolerance& tol) {
  if (actual.size() != expected.size()) {
    return fmt::format("{}: {} elements, expected {}", actual.name, actual.size(), expected.size());
  }
  size_t worst = 0;
  double worst_excess = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual.at(i), e = expected.at(i);
    // A non-finite value on either side fails unless both are the same infinity.
    const double inf = std::numeric_limits<double>::infinity();
    const double excess =
        std::isfinite(a) && std::isfinite(e) ? std::fabs(a - e) - tol.at(i, e) : (a == e ? -inf : inf);
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (worst_excess <= 0) return "";
  const double a = actual.at(worst), e = expected.at(worst);
  const int digits = actual.f64.empty() ? 9 : 17;  // enough to tell floats (doubles) apart
  return fmt::format("{} index {} of {}: expected {:.{}g}, actual {:.{}g}, |diff| {:.3g} > tolerance {:.3g}",
                     actual.name, worst, actual.size(), e, digits, a, digits, std::fabs(a - e), tol.at(worst, e));
}

}  // namespace gpt2::ops
