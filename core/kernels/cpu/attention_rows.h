// What the CPU attention kernels share (attention.cpp, and context
// parallelism's ring in ring_attention.cpp): the tile of query rows, and the
// short vector loops over a head's HS elements.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cpu/fast_math.h"

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

// Where one head's q, k and v sit in a row of qkv ((NH + 2 KVH) heads of HS).
struct HeadColumns {
  int64_t width, HS, q, k, v;  // row width; offsets of query head h and of its key and value heads
  HeadColumns(int64_t width_, int NH, int KVH, int64_t h) : width(width_), HS(width_ / (NH + 2 * KVH)) {
    const int64_t g = h / (NH / KVH);  // the key/value head of query head h
    q = h * HS;
    k = (NH + g) * HS;
    v = (NH + KVH + g) * HS;
  }
};

// Query row t's scores against keys [0, n) (n > t), in place: the causal
// softmax (shifted by the row's max; keys after t zeroed). Returns the
// row's log-sum-exp.
inline float softmax_causal_row(float* row, int64_t t, int64_t n) {
  float maxv = -INFINITY;
  for (int64_t s = 0; s <= t; ++s) maxv = row[s] > maxv ? row[s] : maxv;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t s = 0; s <= t; ++s) {
    row[s] = fast_exp(row[s] - maxv);  // shifted by the row max for stability
    sum += row[s];
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t s = 0; s <= t; ++s) row[s] *= inv;
  for (int64_t s = t + 1; s < n; ++s) row[s] = 0.0f;  // masked
  return maxv + std::log(sum);
}

// The backward of that row, fp32: p holds the scores (scaled), dp = dO . v
// per key; in place, p becomes P = exp(p - lse) and dp dS = P (dp - D) scale,
// D = dO . O; keys after t zeroed.
inline void score_gradient_row(float* p, float* dp, int64_t t, int64_t n, float lse, float D, float scale) {
#pragma omp simd
  for (int64_t s = 0; s <= t; ++s) {
    p[s] = fast_exp(p[s] - lse);
    dp[s] = p[s] * (dp[s] - D) * scale;  // dS
  }
  for (int64_t s = t + 1; s < n; ++s) p[s] = dp[s] = 0.0f;  // masked
}

}  // namespace gpt2::cpu
