// Causal multi-head attention on the CPU, fused: scores, mask, softmax and
// the weighted sum of values are done one query row at a time, so the (T,T)
// attention matrix is never stored. Forward keeps only the log-sum-exp of
// each row; backward rebuilds each probability as exp(score - lse).
// Work is split over (b, h) pairs: their outputs and gradients are disjoint.
#include <omp.h>

#include <cmath>

#include "cpu_backend.h"
#include "fast_math.h"

namespace gpt2::cpu {

namespace {
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


// Query row t of one head: base points at q of (t=0) for this (b, h), rows
// C3 floats apart with k at +C and v at +2C. Writes the head's HS outputs to
// o and returns the row's log-sum-exp. p: scratch of at least t+1 floats.
float attention_row(float* o, float* p, const float* base, int64_t t, int64_t C3, int64_t C,
                    int64_t HS) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const float* q = base + t * C3;
  float maxv = -INFINITY;
  for (int64_t s = 0; s <= t; ++s) {  // causal: keys at or before t
    p[s] = dot(q, base + s * C3 + C, HS) * scale;
    maxv = std::fmax(maxv, p[s]);
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t s = 0; s <= t; ++s) {
    p[s] = fast_exp(p[s] - maxv);  // shifted by the row max for stability
    sum += p[s];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < HS; ++i) o[i] = 0.0f;
  for (int64_t s = 0; s <= t; ++s) axpy(o, p[s] * inv, base + s * C3 + 2 * C, HS);
  return maxv + std::log(sum);
}
}  // namespace

void CpuBackend::attention_forward(Tensor out, Tensor lse, Tensor qkv, int NH) {
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C3 = qkv.dim(2), C = C3 / 3, HS = C / NH;
  float* rows = scratch(static_cast<size_t>(threads_ * T));
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    float* p = rows + omp_get_thread_num() * T;
    const float* base = qkv.data + b * T * C3 + h * HS;  // q of (b, t=0, h)
    for (int64_t t = 0; t < T; ++t) {
      float* o = out.data + (b * T + t) * C + h * HS;
      lse.data[bh * T + t] = attention_row(o, p, base, t, C3, C, HS);
    }
  }
}

void CpuBackend::attention_decode(Tensor out, Tensor qkv, int NH) {
  const int64_t P = qkv.dim(1), C3 = qkv.dim(2), C = C3 / 3, HS = C / NH;
  float* rows = scratch(static_cast<size_t>(threads_ * P));
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t h = 0; h < NH; ++h) {
    attention_row(out.data + h * HS, rows + omp_get_thread_num() * P, qkv.data + h * HS, P - 1, C3, C, HS);
  }
}

void CpuBackend::attention_backward(Tensor dqkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv,
                                    int NH) {
  // Row t: P_s = exp(scale q.k_s - lse_t), dP_s = dO_t . v_s,
  // D_t = sum_s P_s dP_s = dO_t . O_t, dS_s = P_s (dP_s - D_t) * scale;
  // dq_t += dS_s k_s, dk_s += dS_s q_t, dv_s += P_s dO_t.
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C3 = qkv.dim(2), C = C3 / 3, HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    const float* base = qkv.data + b * T * C3 + h * HS;
    float* dbase = dqkv.data + b * T * C3 + h * HS;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t part = 0; part < 3; ++part) {
        float* d = dbase + t * C3 + part * C;
        for (int64_t i = 0; i < HS; ++i) d[i] = 0.0f;
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      const float* q = base + t * C3;
      const float* dO = dout.data + (b * T + t) * C + h * HS;
      const float* O = out.data + (b * T + t) * C + h * HS;
      const float D = dot(dO, O, HS);
      const float row_lse = lse.data[bh * T + t];
      float* dq = dbase + t * C3;
      for (int64_t s = 0; s <= t; ++s) {
        const float* k = base + s * C3 + C;
        const float* v = base + s * C3 + 2 * C;
        const float P = fast_exp(dot(q, k, HS) * scale - row_lse);
        const float dS = P * (dot(dO, v, HS) - D) * scale;
        axpy(dq, dS, k, HS);
        axpy(dbase + s * C3 + C, dS, q, HS);
        axpy(dbase + s * C3 + 2 * C, P, dO, HS);
      }
    }
  }
}

}  // namespace gpt2::cpu
