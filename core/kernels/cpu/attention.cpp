// Causal multi-head attention on the CPU, fused and tiled: for each (b, h)
// and block of kBlock query rows, the scores, mask, softmax and weighted sum
// of values are computed in a (kBlock, T) tile with single-threaded SGEMMs,
// so the (T,T) attention matrix is never stored. Forward keeps only the
// log-sum-exp of each row; backward rebuilds the probabilities from it.
// Grouped-query attention (KVH key/value heads for NH query heads) reads
// key/value head h / (NH / KVH) for query head h. Forward work is split over
// (b, h) pairs, backward over (b, kv head) pairs, the group's query heads in
// order inside: their outputs and gradients are disjoint.
// attention_decode (one query against a KV cache) works row-wise.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/attention_rows.h"
#include "kernels/cpu/fast_math.h"

namespace gpt2::cpu {

namespace {
constexpr int64_t kBlock = kAttentionRows;



// Query row t of one head: base points at row 0 of qkv for this b, rows
// c.width floats apart. Writes the head's HS outputs to o and returns the
// row's log-sum-exp. p: scratch of at least t+1 floats.
float attention_row(float* o, float* p, const float* base, int64_t t, const HeadColumns& c) {
  const int64_t C3 = c.width, HS = c.HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const float* q = base + t * C3 + c.q;
  for (int64_t s = 0; s <= t; ++s) p[s] = dot(q, base + s * C3 + c.k, HS) * scale;  // causal: keys at or before t
  const float lse = softmax_causal_row(p, t, t + 1);
  for (int64_t i = 0; i < HS; ++i) o[i] = 0.0f;
  for (int64_t s = 0; s <= t; ++s) axpy(o, p[s], base + s * C3 + c.v, HS);
  return lse;
}
}  // namespace

// One dispatch per call on the output's type and the products' type
// (products_, fixed when the backend was made).
void CpuBackend::attention_forward(Tensor out, Tensor lse, Tensor qkv, int NH, int KVH) {
  dispatch_dtype(products_, [&](auto product) {
    dispatch_dtype(out.dtype, [&](auto tag) {
      attention_tiles<decltype(tag), decltype(product)>(out.as<decltype(tag)>(), lse, qkv, out.dim(2), NH, KVH);
    });
  });
}

// out (B,T,C) of element type E: a bf16 output is the float tile's rounding.
// Prod: the products' operand type.
template <typename E, typename Prod>
void CpuBackend::attention_tiles(E* out, Tensor lse, Tensor qkv, int64_t C, int NH, int KVH) {
  // Per (b, h), in blocks of kBlock query rows [r0, r1): the block sees keys
  // [0, r1) only, so the scores S = scale Q K^T and the output O = P V are
  // GEMMs on the causal lower part (62.5% of the square at T = 256).
  constexpr bool kF32 = std::is_same_v<E, float>;
  constexpr bool kBf16Products = std::is_same_v<Prod, bf16>;
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C3 = qkv.dim(2), HS = C / NH;
  const int64_t tile = kF32 ? 0 : kBlock * HS;  // a bf16 output's float tile, after the scores
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  float* scratch_all = scratch(static_cast<size_t>(threads_ * (kBlock * T + tile)));
  // Under train.precision bf16 the two products take bf16 operands: qkv
  // rounded once here, P rounded per tile (attention_bf16 below).
  const bf16* qkv16 = nullptr;
  if constexpr (kBf16Products) {
    qkv16 = as_bf16(bf16_a_, qkv);
    ready_tile_products(static_cast<size_t>(kBlock * T));
  }
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    const int th = omp_get_thread_num();
    const HeadColumns c(C3, NH, KVH, h);
    float* S = scratch_all + th * (kBlock * T + tile);  // (kBlock, T)
    const float* Q = qkv.data + b * T * C3 + c.q;  // rows C3 apart
    const float* K = qkv.data + b * T * C3 + c.k;
    const float* V = qkv.data + b * T * C3 + c.v;
    E* O = out + b * T * C + h * HS;     // rows C apart
    for (int64_t r0 = 0; r0 < T; r0 += kBlock) {
      const int64_t r1 = std::min(T, r0 + kBlock), m = r1 - r0, n = r1;
      // S (m, n) = scale * Q[r0:r1] K[0:n]^T
      if constexpr (kBf16Products) {
        const bf16* q16 = qkv16 + b * T * C3 + c.q;
        tile_gemm_[th]->run(S, n, {q16 + r0 * C3, C3, 1}, {qkv16 + b * T * C3 + c.k, 1, C3}, m, n, HS, scale, false);
      } else {
        gemm_.run(th, Sgemm{false, true, static_cast<int>(m), static_cast<int>(n), static_cast<int>(HS), scale,
                            Q + r0 * C3, static_cast<int>(C3), K, static_cast<int>(C3), 0.0f, S, static_cast<int>(n)});
      }
      for (int64_t i = 0; i < m; ++i) {
        const int64_t t = r0 + i;  // keys 0..t are visible
        lse.data[bh * T + t] = softmax_causal_row(S + i * n, t, n);
      }
      // O[r0:r1] (m, HS) = P (m, n) V[0:n] (n, HS): straight into a float
      // output; a bf16 output through the float tile after S, then rounded.
      float* dst = S + kBlock * T;
      int64_t ldd = HS;
      if constexpr (kF32) {
        dst = O + r0 * C;
        ldd = C;
      }
      if constexpr (kBf16Products) {  // P rounded to bf16, then the bf16 product
        bf16* Pb = tile16_.data() + static_cast<size_t>(th) * 2 * kBlock * T;
        for (int64_t i = 0; i < m * n; ++i) Pb[i] = to_bf16(S[i]);
        tile_gemm_[th]->run(dst, ldd, {Pb, n, 1}, {qkv16 + b * T * C3 + c.v, C3, 1}, m, HS, n, 1.0f, false);
      } else {
        gemm_.run(th, Sgemm{false, false, static_cast<int>(m), static_cast<int>(HS), static_cast<int>(n), 1.0f, S,
                            static_cast<int>(n), V, static_cast<int>(C3), 0.0f, dst, static_cast<int>(ldd)});
      }
      if constexpr (!kF32) {
        for (int64_t i = 0; i < m; ++i) {
#pragma omp simd
          for (int64_t j = 0; j < HS; ++j) store(O + (r0 + i) * C, j, dst[i * HS + j]);
        }
      }
    }
  }
}

void CpuBackend::attention_decode(Tensor out, Tensor qkv, int NH, int KVH) {
  expect_f32(out, "attention_decode");  // generation's arena is f32
  const int64_t P = qkv.dim(1), C3 = qkv.dim(2), HS = out.dim(out.ndim - 1) / NH;
  float* rows = scratch(static_cast<size_t>(threads_ * P));
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t h = 0; h < NH; ++h) {
    attention_row(out.data + h * HS, rows + omp_get_thread_num() * P, qkv.data, P - 1, HeadColumns(C3, NH, KVH, h));
  }
}

void CpuBackend::attention_backward(Tensor dqkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv, int NH,
                                    int KVH) {
  dispatch_dtype(products_, [&](auto product) {
    dispatch_dtype(out.dtype, [&](auto tag) {
      attention_backward_tiles<decltype(tag), decltype(product)>(dqkv, dout, out.as<decltype(tag)>(), lse, qkv,
                                                                 out.dim(2), NH, KVH);
    });
  });
}

// The forward's output `out` of element type E: f32 enters through D = dO . O;
// a bf16 one is not read (D comes from the tile). Prod: the products' operand type.
template <typename E, typename Prod>
void CpuBackend::attention_backward_tiles(Tensor dqkv, Tensor dout, const E* out, Tensor lse, Tensor qkv, int64_t C,
                                          int NH, int KVH) {
  // Per (b, h) and block of query rows [r0, r1) over keys [0, r1):
  //   P = exp(scale Q K^T - lse) (masked),  dP = dO V^T,
  //   D_t = sum_s P_ts dP_ts = dO_t . O_t,  dS = P * (dP - D) * scale,
  //   dQ = dS K,  dK += dS^T Q,  dV += P^T dO      (FlashAttention-2's backward)
  // One thread owns a (b, kv head) pair and runs its group's query heads in
  // order, so dK and dV accumulate over the group without races.
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C3 = qkv.dim(2), HS = C / NH;
  const int64_t group = NH / KVH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  float* scratch_all = scratch(static_cast<size_t>(threads_ * 2 * kBlock * T));
  // Under train.precision bf16 the five products take bf16 operands: qkv and
  // dout rounded once here, P and dS rounded per tile; D then comes from the
  // tile whatever O's type (the products' own D).
  constexpr bool kBf16Products = std::is_same_v<Prod, bf16>;
  const bf16* qkv16 = nullptr;
  const bf16* dout16 = nullptr;
  if constexpr (kBf16Products) {
    qkv16 = as_bf16(bf16_a_, qkv);
    dout16 = as_bf16(bf16_b_, dout);
    ready_tile_products(static_cast<size_t>(kBlock * T));
  }
  constexpr bool kTileD = kBf16Products || !std::is_same_v<E, float>;
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t bg = 0; bg < B * KVH; ++bg) {
    const int64_t b = bg / KVH, kv = bg % KVH;
    const int th = omp_get_thread_num();
    float* P = scratch_all + th * 2 * kBlock * T;  // (kBlock, T)
    float* dP = P + kBlock * T;                    // (kBlock, T)
    const HeadColumns first(C3, NH, KVH, kv * group);
    float* dK = dqkv.data + b * T * C3 + first.k;
    float* dV = dqkv.data + b * T * C3 + first.v;
    for (int64_t t = 0; t < T; ++t) {  // dK and dV accumulate over row blocks and the group's heads
      for (int64_t i = 0; i < HS; ++i) dK[t * C3 + i] = dV[t * C3 + i] = 0.0f;
    }
    for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {
      const int64_t bh = b * NH + h;
      const HeadColumns c(C3, NH, KVH, h);
      const float* Q = qkv.data + b * T * C3 + c.q;
      const float* K = qkv.data + b * T * C3 + c.k;
      const float* V = qkv.data + b * T * C3 + c.v;
      const float* dO = dout.data + b * T * C + h * HS;
      const E* O = out + b * T * C + h * HS;
      float* dQ = dqkv.data + b * T * C3 + c.q;
      for (int64_t r0 = 0; r0 < T; r0 += kBlock) {
        const int64_t r1 = std::min(T, r0 + kBlock), m = r1 - r0, n = r1;
        const int im = static_cast<int>(m), in = static_cast<int>(n), ihs = static_cast<int>(HS);
        const int ic3 = static_cast<int>(C3), ic = static_cast<int>(C);
        const bf16* head16 = kBf16Products ? qkv16 + b * T * C3 : nullptr;        // this b's qkv rows, bf16
        const bf16* dO16 = kBf16Products ? dout16 + b * T * C + h * HS : nullptr;  // this head's dout, bf16
        if constexpr (kBf16Products) {
          tile_gemm_[th]->run(P, n, {head16 + c.q + r0 * C3, C3, 1}, {head16 + c.k, 1, C3}, m, n, HS, scale, false);
          tile_gemm_[th]->run(dP, n, {dO16 + r0 * C, C, 1}, {head16 + c.v, 1, C3}, m, n, HS, 1.0f, false);
        } else {
          gemm_.run(th, Sgemm{false, true, im, in, ihs, scale, Q + r0 * C3, ic3, K, ic3, 0.0f, P, in});
          gemm_.run(th, Sgemm{false, true, im, in, ihs, 1.0f, dO + r0 * C, ic, V, ic3, 0.0f, dP, in});
        }
        for (int64_t i = 0; i < m; ++i) {
          const int64_t t = r0 + i;
          float* p = P + i * n;
          float* dp = dP + i * n;
          const float row_lse = lse.data[bh * T + t];
          if constexpr (!kTileD) {  // the fp32 path: D = dO . O
            score_gradient_row(p, dp, t, n, row_lse, dot(dO + t * C, O + t * C, HS), scale);
            continue;
          } else {
            // A bf16 O carries 8 bits, and bf16 products make their own P and
            // dP: D = sum_s P dP instead, the same value in exact arithmetic,
            // from the tile's float P and dP (t + 1 terms).
            float D = 0.0f;
#pragma omp simd reduction(+ : D)
            for (int64_t s = 0; s <= t; ++s) {
              p[s] = fast_exp(p[s] - row_lse);
              D += p[s] * dp[s];
            }
#pragma omp simd
            for (int64_t s = 0; s <= t; ++s) dp[s] = p[s] * (dp[s] - D) * scale;  // dS
          }
          for (int64_t s = t + 1; s < n; ++s) p[s] = dp[s] = 0.0f;  // masked
        }
        // dQ[r0:r1] = dS K[0:n];  dK[0:n] += dS^T Q[r0:r1];  dV[0:n] += P^T dO[r0:r1]
        if constexpr (kBf16Products) {  // dS and P rounded to bf16, then the bf16 products
          bf16* Pb = tile16_.data() + static_cast<size_t>(th) * 2 * kBlock * T;
          bf16* dSb = Pb + kBlock * T;
          for (int64_t i = 0; i < m * n; ++i) {
            Pb[i] = to_bf16(P[i]);
            dSb[i] = to_bf16(dP[i]);
          }
          tile_gemm_[th]->run(dQ + r0 * C3, C3, {dSb, n, 1}, {head16 + c.k, C3, 1}, m, HS, n, 1.0f, false);
          tile_gemm_[th]->run(dK, C3, {dSb, 1, n}, {head16 + c.q + r0 * C3, C3, 1}, n, HS, m, 1.0f, true);
          tile_gemm_[th]->run(dV, C3, {Pb, 1, n}, {dO16 + r0 * C, C, 1}, n, HS, m, 1.0f, true);
        } else {
          gemm_.run(th, Sgemm{false, false, im, ihs, in, 1.0f, dP, in, K, ic3, 0.0f, dQ + r0 * C3, ic3});
          gemm_.run(th, Sgemm{true, false, in, ihs, im, 1.0f, dP, in, Q + r0 * C3, ic3, 1.0f, dK, ic3});
          gemm_.run(th, Sgemm{true, false, in, ihs, im, 1.0f, P, in, dO + r0 * C, ic, 1.0f, dV, ic3});
        }
      }
    }
  }
}

}  // namespace gpt2::cpu
