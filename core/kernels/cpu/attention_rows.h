// What the CPU attention kernels share (attention.cpp, and context
// parallelism's ring in ring_attention.cpp): the tile of query rows, and the
// short vector loops over a head's HS elements.
#pragma once

#include <cstdint>

namespace gpt2::cpu {

// Query rows per tile: the (kAttentionRows, T) score tile of one thread stays in L2.
inline constexpr int64_t kAttentionRows = 64;

inline float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}
inline void axpy(float* y, float alpha, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace gpt2::cpu
