// train.sequence_pieces on the CPU (kernels/sequence_pieces.h; backend.h,
// PieceOps): every sum over a batch's tokens as the balanced binary tree
// over this rank's pairs of pieces, each pair's leaf its rows in the
// canonical order, summed from zero. Serial (cp 1) and a context-parallel
// rank run these same functions on their own pairs, so a rank's result is a
// subtree of serial's tree; the model finishes it over the group
// (model/context_parallel.h). Each leaf is the same computation wherever it
// runs: a product's leaf is one product of the pair's rows gathered in that
// order (the same sizes on every rank), a column sum runs over them in
// order, and the attention's query tiles sit inside pieces and read every
// key before them in position order.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention_rows.h"
#include "kernels/cpu/cpu_backend.h"

namespace gpt2::cpu {

namespace {

// Levels of the balanced tree over n leaves (n a power of two): log2(n) + 1.
int tree_levels(int n) {
  int levels = 1;
  for (int g = 1; g < n; g <<= 1) ++levels;
  return levels;
}

}  // namespace

void CpuBackend::add_floats(float* dst, const float* src, size_t n) {
  const auto count = static_cast<int64_t>(n);
#pragma omp parallel for simd num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < count; ++i) dst[i] = dst[i] + src[i];
}

template <typename Leaf>
float* CpuBackend::pair_tree(size_t count, const Leaf& leaf) {
  const int n = pieces_.pairs();
  const auto levels = static_cast<size_t>(tree_levels(n));
  while (pair_buffers_.size() < levels) pair_buffers_.emplace_back();
  for (Buffer& b : pair_buffers_) {
    if (b.size() < count) b = Buffer(count);
  }
  // Pairs [lo, lo + span) into level `level`'s buffer: the left half there, the right one level deeper.
  const auto subtree = [&](const auto& self, int lo, int span, size_t level) -> void {
    float* dst = pair_buffers_[level].data();
    if (span == 1) {
      std::fill_n(dst, count, 0.0f);
      leaf(lo, dst);
      return;
    }
    self(self, lo, span / 2, level);
    self(self, lo + span / 2, span / 2, level + 1);
    add_floats(dst, pair_buffers_[level + 1].data(), count);
  };
  subtree(subtree, 0, n, 0);
  return pair_buffers_[0].data();
}

void CpuBackend::matmul_weight_pieces(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp) {
  const int64_t N = inp.rows(), C = inp.cols(), OC = dout.cols();
  const int64_t R = pieces_.pair_rows(N);
  const size_t wn = dweight.data != nullptr ? static_cast<size_t>(OC * C) : 0;
  const size_t bn = dbias.data != nullptr ? static_cast<size_t>(OC) : 0;
  const auto need = static_cast<size_t>(R * (OC + C));
  if (gather_.size() < need) gather_ = Buffer(need);
  float* G = gather_.data();  // the pair's rows of dout (R, OC)
  float* X = G + R * OC;      // and of inp (R, C)
  const float* root = pair_tree(wn + bn, [&](int j, float* dst) {
    int64_t at = 0;
    pieces_.for_pair(N, j, [&](int64_t r0, int64_t rows) {
      std::memcpy(G + at * OC, dout.data + r0 * OC, static_cast<size_t>(rows * OC) * sizeof(float));
      std::memcpy(X + at * C, inp.data + r0 * C, static_cast<size_t>(rows * C) * sizeof(float));
      at += rows;
    });
#pragma omp parallel num_threads(threads_)
    {
      const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
      // dst (OC, C) += G^T (OC, R) @ X (R, C): matmul_backward's tiles, over the pair's rows
      const Tiling tw = channel_tiling(static_cast<int>(OC), static_cast<int>(C), nt);
      for (int t = tid; wn > 0 && t < tw.count(); t += nt) {
        const int r = t / tw.cols, c = t % tw.cols;
        const int j0 = tw.row0(static_cast<int>(OC), r), outs = tw.nrows(static_cast<int>(OC), r);
        const int k0 = tw.col0(static_cast<int>(C), c), cols = tw.ncols(static_cast<int>(C), c);
        if (outs > 0 && cols > 0) {
          gemm_.run(tid, Sgemm{true, false, outs, cols, static_cast<int>(R), 1.0f, G + j0, static_cast<int>(OC),
                               X + k0, static_cast<int>(C), 1.0f, dst + static_cast<int64_t>(j0) * C + k0,
                               static_cast<int>(C)});
        }
      }
      // dst[wn..] (OC) = the column sums of G, each column in the pair's row order
      const Tiling tb = tiling(1, static_cast<int>(OC), nt, false);
      float* db = dst + wn;
      for (int t = tid; bn > 0 && t < tb.count(); t += nt) {
        const int j0 = tb.col0(static_cast<int>(OC), t), outs = tb.ncols(static_cast<int>(OC), t);
        for (int64_t i = 0; i < R; ++i) {
          const float* d = G + i * OC;
#pragma omp simd
          for (int k = j0; k < j0 + outs; ++k) db[k] += d[k];
        }
      }
    }
  });
  if (wn > 0) add_floats(dweight.data, root, wn);
  if (bn > 0) add_floats(dbias.data, root + wn, bn);
}

template <bool kLayerNorm>
void CpuBackend::norm_columns_pieces(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor mean,
                                     Tensor rstd) {
  const int64_t N = inp.rows(), C = inp.cols();
  const size_t width = static_cast<size_t>(kLayerNorm ? 2 * C : C);
  const float* root = pair_tree(width, [&](int j, float* dst) {
#pragma omp parallel num_threads(threads_)
    {
      const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
      const int64_t c0 = C * tid / nt, c1 = C * (tid + 1) / nt;
      float* dw = dst;
      float* db = dst + C;
      pieces_.for_pair(N, j, [&](int64_t r0, int64_t rows) {  // norm_weight_columns' rows, the pair's in order
        for (int64_t i = r0; i < r0 + rows; ++i) norm_columns_row<kLayerNorm>(dw, db, dout, inp, mean, rstd, i, c0, c1);
      });
    }
  });
  add_floats(dweight.data, root, static_cast<size_t>(C));
  if constexpr (kLayerNorm) add_floats(dbias.data, root + C, static_cast<size_t>(C));
}

template void CpuBackend::norm_columns_pieces<true>(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor);
template void CpuBackend::norm_columns_pieces<false>(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor);

double CpuBackend::sum_pieces(Tensor x) {
  const int64_t N = x.numel();
  const auto subtree = [&](const auto& self, int lo, int span) -> double {
    if (span == 1) {
      double acc = 0.0;
      pieces_.for_pair(N, lo, [&](int64_t r0, int64_t rows) {
        for (int64_t i = r0; i < r0 + rows; ++i) acc += static_cast<double>(x.data[i]);
      });
      return acc;
    }
    const double left = self(self, lo, span / 2);
    return left + self(self, lo + span / 2, span / 2);
  };
  return subtree(subtree, 0, pieces_.pairs());
}

void CpuBackend::embedding_pieces_backward(Tensor dwte, Tensor dout, const int32_t* tokens) {
  const int64_t N = dout.numel() / dout.dim(dout.ndim - 1), C = dout.dim(dout.ndim - 1);
  const int n = pieces_.pairs();
  // The rows grouped by token, each token's in the pairs' canonical order (a counting sort into buffers kept
  // between calls: nothing allocated once the step's sizes have been seen). by_token_row_[k] and its pair
  // by_token_pair_[k] for k in [token_first_[v], token_first_[v + 1]) are token v's.
  const int64_t V = dwte.dim(0);
  const auto each_row = [&](const auto& f) {
    for (int j = 0; j < n; ++j) {
      pieces_.for_pair(N, j, [&](int64_t r0, int64_t rows) {
        for (int64_t i = r0; i < r0 + rows; ++i) {
          if (tokens[i] >= 0) f(i, j);
        }
      });
    }
  };
  token_first_.assign(static_cast<size_t>(V + 1), 0);
  each_row([&](int64_t i, int) { ++token_first_[static_cast<size_t>(tokens[i]) + 1]; });
  for (int64_t v = 0; v < V; ++v) token_first_[static_cast<size_t>(v + 1)] += token_first_[static_cast<size_t>(v)];
  token_next_ = token_first_;
  by_token_row_.resize(static_cast<size_t>(token_first_.back()));
  by_token_pair_.resize(by_token_row_.size());
  each_row([&](int64_t i, int j) {
    const auto k = static_cast<size_t>(token_next_[static_cast<size_t>(tokens[i])]++);
    by_token_row_[k] = i;
    by_token_pair_[k] = j;
  });
  const auto levels = static_cast<int64_t>(tree_levels(n));
  float* bufs = scratch(static_cast<size_t>(threads_ * levels * C));
#pragma omp parallel num_threads(threads_)
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t c0 = C * tid / nt, c1 = C * (tid + 1) / nt;
    float* mine = bufs + tid * levels * C;
    // The token's entries [b, e) of pairs [lo, lo + span) into level `level` (columns c0..c1): false when
    // there are none. A missing leaf is zero, and x + 0 is x (a sum from +0 is never -0), so skipping it
    // gives the dense tree's bits.
    const auto node = [&](const auto& self, size_t b, size_t e, int lo, int span, int64_t level) -> bool {
      if (b == e) return false;
      float* dst = mine + level * C;
      if (span == 1) {
        for (int64_t c = c0; c < c1; ++c) dst[c] = 0.0f;
        for (size_t k = b; k < e; ++k) {
          const float* d = dout.data + by_token_row_[k] * C;
#pragma omp simd
          for (int64_t c = c0; c < c1; ++c) dst[c] += d[c];
        }
        return true;
      }
      const int mid = lo + span / 2;
      size_t split = b;
      while (split < e && by_token_pair_[split] < mid) ++split;
      const bool left = self(self, b, split, lo, span / 2, level);
      const bool right = self(self, split, e, mid, span / 2, level + 1);
      const float* r = mine + (level + 1) * C;
      if (left && right) {
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) dst[c] = dst[c] + r[c];
      } else if (right) {
        for (int64_t c = c0; c < c1; ++c) dst[c] = r[c];
      }
      return true;
    };
    for (int64_t v = 0; v < V; ++v) {
      const auto b = static_cast<size_t>(token_first_[static_cast<size_t>(v)]);
      const auto e = static_cast<size_t>(token_first_[static_cast<size_t>(v + 1)]);
      if (!node(node, b, e, 0, n, 0)) continue;  // a token no row holds
      float* row = dwte.data + v * C;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) row[c] += mine[c];
    }
  }
}

void CpuBackend::attention_pieces_forward(Tensor out, Tensor lse, Tensor qkv, Tensor whole, int NH, int KVH,
                                          int64_t first_pair) {
  expect_f32(out, "attention_pieces_forward");
  const int64_t La = qkv.dim(1), N = qkv.dim(0) * La, W = qkv.dim(2), C = out.dim(2), HS = C / NH;
  const int64_t T = pieces_.T, m = pieces_.batch_rows(N);
  const int64_t qt = pieces_.row_tile(static_cast<int>(kAttentionRows));
  const int n = pieces_.pairs();
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  float* scratch_all = scratch(static_cast<size_t>(threads_ * qt * T));
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t bh = 0; bh < m * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    const int th = omp_get_thread_num();
    const HeadColumns c(W, NH, KVH, h);
    float* S = scratch_all + th * qt * T;
    const float* K = whole.data + b * T * W + c.k;
    const float* V = whole.data + b * T * W + c.v;
    for (int j = 0; j < n; ++j) {
      pieces_.for_pair_tiles(m, b, j, first_pair, qt, [&](int64_t t0, int64_t lr) {
        const int64_t keys = t0 + qt;  // query rows t0.. see keys [0, t0 + qt)
        gemm_.run(th, Sgemm{false, true, static_cast<int>(qt), static_cast<int>(keys), static_cast<int>(HS), scale,
                            qkv.data + lr * W + c.q, static_cast<int>(W), K, static_cast<int>(W), 0.0f, S,
                            static_cast<int>(keys)});
        for (int64_t i = 0; i < qt; ++i) {
          const int64_t row = lr + i;
          lse.data[((row / La) * NH + h) * La + row % La] = softmax_causal_row(S + i * keys, t0 + i, keys);
        }
        gemm_.run(th, Sgemm{false, false, static_cast<int>(qt), static_cast<int>(HS), static_cast<int>(keys), 1.0f,
                            S, static_cast<int>(keys), V, static_cast<int>(W), 0.0f, out.data + lr * C + h * HS,
                            static_cast<int>(C)});
      });
    }
  }
}

void CpuBackend::attention_pieces_backward(Tensor dqkv, Tensor dkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv,
                                           Tensor whole, int NH, int KVH, int64_t first_pair) {
  expect_f32(out, "attention_pieces_backward");
  const int64_t La = qkv.dim(1), N = qkv.dim(0) * La, W = qkv.dim(2), C = out.dim(2), HS = C / NH;
  const int64_t T = pieces_.T, m = pieces_.batch_rows(N);
  const int64_t qt = pieces_.row_tile(static_cast<int>(kAttentionRows)), group = NH / KVH, KV = 2 * KVH * HS;
  const int n = pieces_.pairs();
  const int64_t levels = tree_levels(n), leaf = T * 2 * HS;  // a leaf: (T, 2 HS), dK's HS columns then dV's
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int64_t per_thread = 2 * qt * T + levels * leaf;
  float* scratch_all = scratch(static_cast<size_t>(threads_ * per_thread));
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t bg = 0; bg < m * KVH; ++bg) {
    const int64_t b = bg / KVH, kv = bg % KVH;
    const int th = omp_get_thread_num();
    float* P = scratch_all + th * per_thread;  // (qt, T)
    float* dP = P + qt * T;                    // (qt, T)
    float* tree = dP + qt * T;                 // levels x (T, 2 HS)
    const auto ihs = static_cast<int>(HS), iw = static_cast<int>(W), ic = static_cast<int>(C);
    const auto ld = static_cast<int>(2 * HS);
    // Pair j's leaf: every query head of the group, then the pair's head piece and tail piece, tile by tile.
    const auto leaf_of = [&](int j, float* dKV) {
      std::fill_n(dKV, leaf, 0.0f);
      for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {
        const HeadColumns c(W, NH, KVH, h);
        const float* K = whole.data + b * T * W + c.k;
        const float* V = whole.data + b * T * W + c.v;
        pieces_.for_pair_tiles(m, b, j, first_pair, qt, [&](int64_t t0, int64_t lr) {
          const int64_t keys = t0 + qt;
          const auto iq = static_cast<int>(qt), ik = static_cast<int>(keys);
          const float* Q = qkv.data + lr * W + c.q;
          const float* dO = dout.data + lr * C + h * HS;
          gemm_.run(th, Sgemm{false, true, iq, ik, ihs, scale, Q, iw, K, iw, 0.0f, P, ik});
          gemm_.run(th, Sgemm{false, true, iq, ik, ihs, 1.0f, dO, ic, V, iw, 0.0f, dP, ik});
          for (int64_t i = 0; i < qt; ++i) {
            const int64_t row = lr + i;
            const float row_lse = lse.data[((row / La) * NH + h) * La + row % La];
            const float D = dot(dout.data + row * C + h * HS, out.data + row * C + h * HS, HS);
            score_gradient_row(P + i * keys, dP + i * keys, t0 + i, keys, row_lse, D, scale);
          }
          gemm_.run(th, Sgemm{false, false, iq, ihs, ik, 1.0f, dP, ik, K, iw, 0.0f, dqkv.data + lr * W + c.q, iw});
          gemm_.run(th, Sgemm{true, false, ik, ihs, iq, 1.0f, dP, ik, Q, iw, 1.0f, dKV, ld});
          gemm_.run(th, Sgemm{true, false, ik, ihs, iq, 1.0f, P, ik, dO, ic, 1.0f, dKV + HS, ld});
        });
      }
    };
    const auto subtree = [&](const auto& self, int lo, int span, int64_t level) -> void {
      float* dst = tree + level * leaf;
      if (span == 1) {
        leaf_of(lo, dst);
        return;
      }
      self(self, lo, span / 2, level);
      self(self, lo + span / 2, span / 2, level + 1);
      const float* r = tree + (level + 1) * leaf;
#pragma omp simd
      for (int64_t i = 0; i < leaf; ++i) dst[i] = dst[i] + r[i];
    };
    subtree(subtree, 0, n, 0);
    for (int64_t t = 0; t < T; ++t) {  // the root into dkv's key and value columns of this head
      float* row = dkv.data + (b * T + t) * KV;
      std::copy_n(tree + t * 2 * HS, HS, row + kv * HS);
      std::copy_n(tree + t * 2 * HS + HS, HS, row + (KVH + kv) * HS);
    }
  }
}

}  // namespace gpt2::cpu
