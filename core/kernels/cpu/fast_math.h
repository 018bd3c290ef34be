// Vectorisable float exp and tanh for the CPU kernels. glibc only offers
// vector versions of expf/tanhf under -ffast-math, which we do not use (it
// would also change every reduction); these are plain arithmetic that the
// compiler turns into SIMD code inside `omp simd` loops.
// Accuracy: relative error of fast_exp below 2e-7 (2 ulp) on [-87, 88];
// fast_tanh has absolute error below 3e-7. Tests hold the kernels that use
// them to the reference within tolerances that include this.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace gpt2::cpu {

// exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln2 / 2 (+ rounding); exp(r) by the
// Cephes degree-6 minimax polynomial; ln 2 split in two for an exact n * ln 2.
inline float fast_exp(float x) {
  // Plain comparisons, not std::fmin/fmax: those are libm calls here and
  // stop the loop from vectorising.
  x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  // Round to nearest by adding and removing 1.5 * 2^23 (exact for |v| < 2^22;
  // std::floor would not vectorise without -ffast-math).
  constexpr float kRound = 12582912.0f;
  float n = (x * 1.44269504088896341f + kRound) - kRound;
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

// tanh(u) = sign(u) * (1 - e) / (1 + e), e = exp(-2|u|).
inline float fast_tanh(float u) {
  float e = fast_exp(-2.0f * std::fabs(u));
  float t = (1.0f - e) / (1.0f + e);
  return std::copysign(t, u);
}

}  // namespace gpt2::cpu
