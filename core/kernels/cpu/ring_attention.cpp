// Context parallelism's ring attention on the CPU (backend.h,
// attention_block_*): one block of keys and values against a rank's query
// rows, row by row. Forward work is split over (row block n, head) pairs,
// backward over (n, key/value head) pairs with the group's query heads in
// order inside, as attention.cpp's: their outputs and gradients are disjoint.
// The blocks are a rank's chunk of the sequence (T / (2 cp) rows), so the
// score rows are short and kept whole in a thread's scratch.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/fast_math.h"

namespace gpt2::cpu {

namespace {

inline float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// Where the heads sit: query head h in a qkv row (W wide), key/value head g
// in a packed block's row (2 KVH HS wide: keys, then values).
struct BlockColumns {
  int64_t L, NH, KVH, HS, W, KV;
  BlockColumns(Tensor qkv, int nh, int kvh)
      : L(qkv.dim(1)), NH(nh), KVH(kvh), HS(qkv.dim(2) / (nh + 2 * kvh)), W(qkv.dim(2)), KV(2 * kvh * HS) {}
  int64_t key(int64_t g) const { return g * HS; }
  int64_t value(int64_t g) const { return (KVH + g) * HS; }
  int64_t visible(int64_t t, bool causal) const { return causal ? t + 1 : L; }
};

}  // namespace

void CpuBackend::attention_block_forward(Tensor out, Tensor lse, Tensor qkv, Tensor kv, int NH, int KVH, bool causal,
                                         bool merge) {
  expect_f32(out, "attention_block_forward");
  const BlockColumns c(qkv, NH, KVH);
  const int64_t N = qkv.dim(0), L = c.L, HS = c.HS, C = NH * HS, group = NH / KVH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  float* scratch_all = scratch(static_cast<size_t>(threads_ * (L + HS)));
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t nh = 0; nh < N * NH; ++nh) {
    const int64_t n = nh / NH, h = nh % NH, g = h / group;
    float* p = scratch_all + omp_get_thread_num() * (L + HS);
    float* o = p + L;
    const float* K = kv.data + n * L * c.KV + c.key(g);
    const float* V = kv.data + n * L * c.KV + c.value(g);
    for (int64_t t = 0; t < L; ++t) {
      const float* q = qkv.data + (n * L + t) * c.W + h * HS;
      const int64_t S = c.visible(t, causal);
      float maxv = -INFINITY;
      for (int64_t s = 0; s < S; ++s) {
        p[s] = dot(q, K + s * c.KV, HS) * scale;
        maxv = std::max(maxv, p[s]);
      }
      float sum = 0.0f;
      for (int64_t s = 0; s < S; ++s) sum += (p[s] = fast_exp(p[s] - maxv));
      const float inv = 1.0f / sum;
      std::fill(o, o + HS, 0.0f);
      for (int64_t s = 0; s < S; ++s) {
        const float w = p[s] * inv;
        const float* v = V + s * c.KV;
#pragma omp simd
        for (int64_t i = 0; i < HS; ++i) o[i] += w * v[i];
      }
      const float block_lse = maxv + std::log(sum);
      float* dst = out.data + (n * L + t) * C + h * HS;
      float& row_lse = lse.data[nh * L + t];
      if (!merge) {
        std::copy(o, o + HS, dst);
        row_lse = block_lse;
        continue;
      }
      // The two parts weighted by their shares of the merged normaliser.
      const float m = std::max(row_lse, block_lse);
      const float w_old = std::exp(row_lse - m), w_new = std::exp(block_lse - m), inv_total = 1.0f / (w_old + w_new);
#pragma omp simd
      for (int64_t i = 0; i < HS; ++i) dst[i] = (dst[i] * w_old + o[i] * w_new) * inv_total;
      row_lse = m + std::log(w_old + w_new);
    }
  }
}

void CpuBackend::attention_block_backward(Tensor dqkv, Tensor dkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv,
                                          Tensor kv, int NH, int KVH, bool causal) {
  expect_f32(out, "attention_block_backward");
  const BlockColumns c(qkv, NH, KVH);
  const int64_t N = qkv.dim(0), L = c.L, HS = c.HS, C = NH * HS, group = NH / KVH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t ng = 0; ng < N * KVH; ++ng) {
    const int64_t n = ng / KVH, g = ng % KVH;
    const float* K = kv.data + n * L * c.KV + c.key(g);
    const float* V = kv.data + n * L * c.KV + c.value(g);
    float* dK = dkv.data + n * L * c.KV + c.key(g);
    float* dV = dkv.data + n * L * c.KV + c.value(g);
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      for (int64_t t = 0; t < L; ++t) {
        const float* q = qkv.data + (n * L + t) * c.W + h * HS;
        float* dq = dqkv.data + (n * L + t) * c.W + h * HS;
        const float* dO = dout.data + (n * L + t) * C + h * HS;
        const float D = dot(dO, out.data + (n * L + t) * C + h * HS, HS);
        const float row_lse = lse.data[(n * NH + h) * L + t];
        const int64_t S = c.visible(t, causal);
        for (int64_t s = 0; s < S; ++s) {
          const float P = fast_exp(dot(q, K + s * c.KV, HS) * scale - row_lse);
          const float dS = P * (dot(dO, V + s * c.KV, HS) - D) * scale;
          float* dk = dK + s * c.KV;
          float* dv = dV + s * c.KV;
          const float* k = K + s * c.KV;
#pragma omp simd
          for (int64_t i = 0; i < HS; ++i) {
            dq[i] += dS * k[i];
            dk[i] += dS * q[i];
            dv[i] += P * dO[i];
          }
        }
      }
    }
  }
}

}  // namespace gpt2::cpu
