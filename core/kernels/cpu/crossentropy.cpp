// Softmax + cross-entropy on the CPU, one row of V logits at a time. The
// backward pass recomputes the softmax from the logits instead of storing
// the (N,V) probabilities, and may write dlogits over the logits.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/fast_math.h"

namespace gpt2::cpu {

namespace {
struct RowStats {
  float max;
  float sum;  // sum of exp(z - max)
};

RowStats row_stats(const float* z, int64_t V) {
  float m = z[0];
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < V; ++j) m = std::max(m, z[j]);
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < V; ++j) s += fast_exp(z[j] - m);
  return {m, s};
}
}  // namespace

void CpuBackend::crossentropy_forward(Tensor losses, Tensor logits, const int32_t* targets) {
  const int64_t N = logits.rows(), V = logits.cols();
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* z = logits.data + i * V;
    RowStats r = row_stats(z, V);
    losses.data[i] = r.max + std::log(r.sum) - z[targets[i]];
  }
}

void CpuBackend::crossentropy_backward(Tensor dlogits, Tensor logits, const int32_t* targets,
                                       float dloss) {
  const int64_t N = logits.rows(), V = logits.cols();
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* z = logits.data + i * V;
    float* dz = dlogits.data + i * V;
    RowStats r = row_stats(z, V);
    const float inv = 1.0f / r.sum;
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) dz[j] = dloss * fast_exp(z[j] - r.max) * inv;
    dz[targets[i]] -= dloss;
  }
}

namespace {
// The columns of a shard of W starting at global column v0 that are real
// vocabulary entries (the rest is padding).
int64_t real_columns(int64_t W, int64_t v0, int64_t vocab) { return std::clamp<int64_t>(vocab - v0, 0, W); }
}  // namespace

void CpuBackend::crossentropy_shard_stats(Tensor lse, Tensor target_logit, Tensor logits, const int32_t* targets,
                                          int64_t v0, int64_t vocab) {
  const int64_t N = logits.rows(), W = logits.cols(), real = real_columns(W, v0, vocab);
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* z = logits.data + i * W;
    const int64_t t = targets[i] - v0;
    target_logit.data[i] = t >= 0 && t < real ? z[t] : 0.0f;
    if (real == 0) {
      lse.data[i] = -std::numeric_limits<float>::infinity();
      continue;
    }
    const RowStats r = row_stats(z, real);
    lse.data[i] = r.max + std::log(r.sum);
  }
}

void CpuBackend::crossentropy_shard_combine(Tensor losses, Tensor lse, Tensor parts) {
  const int64_t P = parts.dim(0) - 1, N = parts.dim(1);
  const float* p = parts.data;
  for (int64_t i = 0; i < N; ++i) {  // P values a row: too little work to share out
    float m = p[i];
    for (int64_t r = 1; r < P; ++r) m = std::max(m, p[r * N + i]);
    float s = 0.0f;
    for (int64_t r = 0; r < P; ++r) s += std::exp(p[r * N + i] - m);
    lse.data[i] = m + std::log(s);
    losses.data[i] = lse.data[i] - p[P * N + i];
  }
}

void CpuBackend::crossentropy_shard_backward(Tensor dlogits, Tensor logits, Tensor lse, const int32_t* targets,
                                             int64_t v0, int64_t vocab, float dloss) {
  const int64_t N = logits.rows(), W = logits.cols(), real = real_columns(W, v0, vocab);
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* z = logits.data + i * W;
    float* dz = dlogits.data + i * W;
    const float l = lse.data[i];
#pragma omp simd
    for (int64_t j = 0; j < real; ++j) dz[j] = dloss * fast_exp(z[j] - l);
    for (int64_t j = real; j < W; ++j) dz[j] = 0.0f;
    const int64_t t = targets[i] - v0;
    if (t >= 0 && t < real) dz[t] -= dloss;
  }
}

}  // namespace gpt2::cpu
