// Softmax + cross-entropy on the CPU, one row of V logits at a time. The
// backward pass recomputes the softmax from the logits instead of storing
// the (N,V) probabilities, and may write dlogits over the logits.
#include <algorithm>
#include <cmath>

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

}  // namespace gpt2::cpu
