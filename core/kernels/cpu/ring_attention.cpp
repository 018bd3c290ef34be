// Context parallelism's ring attention on the CPU (backend.h,
// attention_block_*): one block of keys and values against a rank's query
// rows, tiled as attention.cpp's attention is: for each (row block n, head)
// and block of kBlock query rows, the scores against the block's visible
// keys and the weighted sum of its values are single-threaded SGEMMs
// (through the backend's providers) on a (kBlock, L) tile, so no (L, L)
// matrix is stored. Forward work is split over (n, head) pairs, backward
// over (n, key/value head) pairs with the group's query heads in order
// inside: their outputs and gradients are disjoint.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/attention_rows.h"
#include "kernels/cpu/fast_math.h"

namespace gpt2::cpu {

namespace {
constexpr int64_t kBlock = kAttentionRows;  // query rows per tile, as attention.cpp's

// Where the heads sit: query head h in a qkv row (W wide), key/value head g
// in a packed block's row (KV = 2 KVH HS wide: keys, then values).
struct BlockColumns {
  int64_t L, NH, KVH, HS, W, KV;
  BlockColumns(Tensor qkv, int nh, int kvh)
      : L(qkv.dim(1)), NH(nh), KVH(kvh), HS(qkv.dim(2) / (nh + 2 * kvh)), W(qkv.dim(2)), KV(2 * kvh * HS) {}
  int64_t key(int64_t g) const { return g * HS; }
  int64_t value(int64_t g) const { return (KVH + g) * HS; }
  // The keys a tile of query rows [r0, r1) reads: up to r1 when causal, all L else.
  int64_t keys(int64_t r1, bool causal) const { return causal ? r1 : L; }
};

}  // namespace

void CpuBackend::attention_block_forward(Tensor out, Tensor lse, Tensor qkv, Tensor kv, int NH, int KVH, bool causal,
                                         bool merge) {
  expect_f32(out, "attention_block_forward");  // the merge runs on the float output (docs/context_parallel.md)
  dispatch_dtype(products_, [&](auto product) {
    block_tiles<decltype(product)>(out, lse, qkv, kv, NH, KVH, causal, merge);
  });
}

void CpuBackend::attention_block_backward(Tensor dqkv, Tensor dkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv,
                                          Tensor kv, int NH, int KVH, bool causal) {
  expect_f32(out, "attention_block_backward");  // D = dO . O from the float output
  dispatch_dtype(products_, [&](auto product) {
    block_backward_tiles<decltype(product)>(dqkv, dkv, dout, out, lse, qkv, kv, NH, KVH, causal);
  });
}

// Under bf16 products (train.precision bf16) the two products take bf16
// operands as attention_tiles' do: q, k and v rounded once per call, P per tile.
template <typename Prod>
void CpuBackend::block_tiles(Tensor out, Tensor lse, Tensor qkv, Tensor kv, int NH, int KVH, bool causal, bool merge) {
  constexpr bool kBf16 = std::is_same_v<Prod, bf16>;
  const BlockColumns c(qkv, NH, KVH);
  const int64_t N = qkv.dim(0), L = c.L, HS = c.HS, C = NH * HS, group = NH / KVH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int64_t per_thread = kBlock * L + kBlock * HS;  // the scores' tile, then the block's output tile
  float* scratch_all = scratch(static_cast<size_t>(threads_ * per_thread));
  const bf16* qkv16 = nullptr;
  const bf16* kv16 = nullptr;
  if constexpr (kBf16) {
    qkv16 = as_bf16(bf16_a_, qkv);
    kv16 = as_bf16(bf16_b_, kv);
    ready_tile_products(static_cast<size_t>(kBlock * L));
  }
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t nh = 0; nh < N * NH; ++nh) {
    const int64_t n = nh / NH, h = nh % NH, g = h / group;
    const int th = omp_get_thread_num();
    float* S = scratch_all + th * per_thread;  // (kBlock, L)
    float* Ob = S + kBlock * L;                // (kBlock, HS)
    const int64_t q_at = n * L * c.W + h * HS, k_at = n * L * c.KV + c.key(g), v_at = n * L * c.KV + c.value(g);
    for (int64_t r0 = 0; r0 < L; r0 += kBlock) {
      const int64_t r1 = std::min(L, r0 + kBlock), m = r1 - r0, k = c.keys(r1, causal);
      // S (m, k) = scale Q[r0:r1] K[0:k]^T
      if constexpr (kBf16) {
        tile_gemm_[th]->run(S, k, {qkv16 + q_at + r0 * c.W, c.W, 1}, {kv16 + k_at, 1, c.KV}, m, k, HS, scale, false);
      } else {
        gemm_.run(th, Sgemm{false, true, static_cast<int>(m), static_cast<int>(k), static_cast<int>(HS), scale,
                            qkv.data + q_at + r0 * c.W, static_cast<int>(c.W), kv.data + k_at, static_cast<int>(c.KV),
                            0.0f, S, static_cast<int>(k)});
      }
      float block_lse[kBlock];
      for (int64_t i = 0; i < m; ++i) {
        const int64_t t = r0 + i, visible = causal ? t + 1 : k;
        float* row = S + i * k;
        float maxv = -INFINITY;
        for (int64_t s = 0; s < visible; ++s) maxv = row[s] > maxv ? row[s] : maxv;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t s = 0; s < visible; ++s) {
          row[s] = fast_exp(row[s] - maxv);
          sum += row[s];
        }
        const float inv = 1.0f / sum;
#pragma omp simd
        for (int64_t s = 0; s < visible; ++s) row[s] *= inv;
        for (int64_t s = visible; s < k; ++s) row[s] = 0.0f;  // masked
        block_lse[i] = maxv + std::log(sum);
      }
      // The block's output Ob (m, HS) = P (m, k) V[0:k]
      if constexpr (kBf16) {  // P rounded to bf16, then the bf16 product
        bf16* Pb = tile16_.data() + static_cast<size_t>(th) * 2 * kBlock * L;
        for (int64_t i = 0; i < m * k; ++i) Pb[i] = to_bf16(S[i]);
        tile_gemm_[th]->run(Ob, HS, {Pb, k, 1}, {kv16 + v_at, c.KV, 1}, m, HS, k, 1.0f, false);
      } else {
        gemm_.run(th, Sgemm{false, false, static_cast<int>(m), static_cast<int>(HS), static_cast<int>(k), 1.0f, S,
                            static_cast<int>(k), kv.data + v_at, static_cast<int>(c.KV), 0.0f, Ob,
                            static_cast<int>(HS)});
      }
      for (int64_t i = 0; i < m; ++i) {
        float* dst = out.data + (n * L + r0 + i) * C + h * HS;
        float& row_lse = lse.data[nh * L + r0 + i];
        const float* o = Ob + i * HS;
        if (!merge) {
          std::copy(o, o + HS, dst);
          row_lse = block_lse[i];
          continue;
        }
        // The two parts weighted by their shares of the merged normaliser.
        const float mx = std::max(row_lse, block_lse[i]);
        const float w_old = std::exp(row_lse - mx), w_new = std::exp(block_lse[i] - mx);
        const float inv_total = 1.0f / (w_old + w_new);
#pragma omp simd
        for (int64_t j = 0; j < HS; ++j) dst[j] = (dst[j] * w_old + o[j] * w_new) * inv_total;
        row_lse = mx + std::log(w_old + w_new);
      }
    }
  }
}

// Under bf16 products the five products take bf16 operands as
// attention_backward_tiles' do (q, k, v and dO rounded once per call, P and
// dS per tile); D = dO . O stays the float output's (a block holds only its
// part of the row's sum P dP).
template <typename Prod>
void CpuBackend::block_backward_tiles(Tensor dqkv, Tensor dkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv,
                                      Tensor kv, int NH, int KVH, bool causal) {
  // Per tile of query rows [r0, r1) over the block's visible keys [0, k), with the final lse:
  //   P = exp(scale Q K^T - lse) (masked),  dP = dO V^T,  D_t = dO_t . O_t,  dS = P (dP - D) scale,
  //   dQ += dS K,  dK += dS^T Q,  dV += P^T dO.
  constexpr bool kBf16 = std::is_same_v<Prod, bf16>;
  const BlockColumns c(qkv, NH, KVH);
  const int64_t N = qkv.dim(0), L = c.L, HS = c.HS, C = NH * HS, group = NH / KVH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  float* scratch_all = scratch(static_cast<size_t>(threads_ * 2 * kBlock * L));
  const int iW = static_cast<int>(c.W), iKV = static_cast<int>(c.KV), iC = static_cast<int>(C),
            iHS = static_cast<int>(HS);
  const bf16* qkv16 = nullptr;
  const bf16* kv16 = nullptr;
  const bf16* dout16 = nullptr;
  if constexpr (kBf16) {
    qkv16 = as_bf16(bf16_a_, qkv);
    kv16 = as_bf16(bf16_b_, kv);
    dout16 = as_bf16(bf16_c_, dout);
    ready_tile_products(static_cast<size_t>(kBlock * L));
  }
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t ng = 0; ng < N * KVH; ++ng) {
    const int64_t n = ng / KVH, g = ng % KVH;
    const int th = omp_get_thread_num();
    float* P = scratch_all + th * 2 * kBlock * L;  // (kBlock, L)
    float* dP = P + kBlock * L;                    // (kBlock, L), then dS
    const int64_t k_at = n * L * c.KV + c.key(g), v_at = n * L * c.KV + c.value(g);
    const float* K = kv.data + k_at;
    const float* V = kv.data + v_at;
    float* dK = dkv.data + k_at;
    float* dV = dkv.data + v_at;
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const int64_t q_at = n * L * c.W + h * HS, o_at = n * L * C + h * HS;
      const float* Q = qkv.data + q_at;
      float* dQ = dqkv.data + q_at;
      const float* dO = dout.data + o_at;
      const float* O = out.data + o_at;
      const float* row_lse = lse.data + (n * NH + h) * L;
      for (int64_t r0 = 0; r0 < L; r0 += kBlock) {
        const int64_t r1 = std::min(L, r0 + kBlock), m = r1 - r0, k = c.keys(r1, causal);
        const int im = static_cast<int>(m), ik = static_cast<int>(k);
        if constexpr (kBf16) {
          tile_gemm_[th]->run(P, k, {qkv16 + q_at + r0 * c.W, c.W, 1}, {kv16 + k_at, 1, c.KV}, m, k, HS, scale, false);
          tile_gemm_[th]->run(dP, k, {dout16 + o_at + r0 * C, C, 1}, {kv16 + v_at, 1, c.KV}, m, k, HS, 1.0f, false);
        } else {
          gemm_.run(th, Sgemm{false, true, im, ik, iHS, scale, Q + r0 * c.W, iW, K, iKV, 0.0f, P, ik});
          gemm_.run(th, Sgemm{false, true, im, ik, iHS, 1.0f, dO + r0 * C, iC, V, iKV, 0.0f, dP, ik});
        }
        for (int64_t i = 0; i < m; ++i) {
          const int64_t t = r0 + i, visible = causal ? t + 1 : k;
          float* p = P + i * k;
          float* dp = dP + i * k;
          const float D = dot(dO + t * C, O + t * C, HS), l = row_lse[t];
#pragma omp simd
          for (int64_t s = 0; s < visible; ++s) {
            p[s] = fast_exp(p[s] - l);
            dp[s] = p[s] * (dp[s] - D) * scale;  // dS
          }
          for (int64_t s = visible; s < k; ++s) p[s] = dp[s] = 0.0f;  // masked
        }
        // dQ[r0:r1] += dS K[0:k];  dK[0:k] += dS^T Q[r0:r1];  dV[0:k] += P^T dO[r0:r1]
        if constexpr (kBf16) {  // dS and P rounded to bf16, then the bf16 products
          bf16* Pb = tile16_.data() + static_cast<size_t>(th) * 2 * kBlock * L;
          bf16* dSb = Pb + kBlock * L;
          for (int64_t i = 0; i < m * k; ++i) {
            Pb[i] = to_bf16(P[i]);
            dSb[i] = to_bf16(dP[i]);
          }
          tile_gemm_[th]->run(dQ + r0 * c.W, c.W, {dSb, k, 1}, {kv16 + k_at, c.KV, 1}, m, HS, k, 1.0f, true);
          tile_gemm_[th]->run(dK, c.KV, {dSb, 1, k}, {qkv16 + q_at + r0 * c.W, c.W, 1}, k, HS, m, 1.0f, true);
          tile_gemm_[th]->run(dV, c.KV, {Pb, 1, k}, {dout16 + o_at + r0 * C, C, 1}, k, HS, m, 1.0f, true);
        } else {
          gemm_.run(th, Sgemm{false, false, im, iHS, ik, 1.0f, dP, ik, K, iKV, 1.0f, dQ + r0 * c.W, iW});
          gemm_.run(th, Sgemm{true, false, ik, iHS, im, 1.0f, dP, ik, Q + r0 * c.W, iW, 1.0f, dK, iKV});
          gemm_.run(th, Sgemm{true, false, ik, iHS, im, 1.0f, P, ik, dO + r0 * C, iC, 1.0f, dV, iKV});
        }
      }
    }
  }
}

}  // namespace gpt2::cpu
