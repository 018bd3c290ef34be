// Matmul (linear layer) on the CPU. The GEMMs (OpenBLAS or oneDNN, chosen
// per shape: gemm.h) run single-threaded, split across our OpenMP threads
// into disjoint slabs of the output: one thread pool for the whole backend (no two pools fighting over
// the cores), a fixed partition (bit-identical results run to run), and no
// heap traffic (OpenBLAS 0.3.21's threaded GEMM driver mallocs a job array
// on every call; its single-threaded path does not).
// The bias is folded in by filling `out` with it and asking SGEMM for
// beta = 1, which saves a second pass over the output.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/cpu_backend.h"

namespace gpt2::cpu {

namespace {
// Below this many rows the forward matmul is a few GEMVs split by output column.
constexpr int kFewRows = 8;
// train.deterministic: a product's output is cut into tiles of at most this
// many rows (and column_tile_ columns), whatever the thread count, and
// threads take tiles in turn. A product's result for one element can depend
// on the size of the product it sits in (OpenBLAS's small-matrix kernels),
// so the tiles, not the threads, fix the sizes. 1024 rows: a canonical
// chunk of the original configuration (4 rows of 256) is one row of tiles,
// so each tile packs its weight panel once; 256-row tiles cost +16% (1
// thread) and +38% (2 threads) on the whole deterministic step there, 1024
// rows +10-16% and +13-15% (docs/determinism.md, "The cost").
constexpr int kDeterministicRows = 1024;
}  // namespace

// The tiles a product's output (rows x cols) is cut into when nt threads
// share it. By default one slab per thread along the dimension the product
// splits (`by_rows`); under deterministic_ fixed blocks both ways, whatever
// the thread count, which threads take in turn (tile t = (t / cols, t % cols)).
// Under deterministic_ the columns are cut every column_tile_ from column 0
// (not into near-equal slabs): a product over a tensor-parallel shard of the
// columns then makes, call for call, the products the whole one makes there.
CpuBackend::Tiling CpuBackend::tiling(int rows, int cols, int nt, bool by_rows) const {
  if (!deterministic_) return by_rows ? Tiling{nt, 1} : Tiling{1, nt};
  const auto blocks = [](int n, int w) { return std::max(1, (n + w - 1) / w); };
  if (pieces_.on()) {  // train.sequence_pieces: row tiles inside pieces, so every rank makes serial's products
    const int w = pieces_.row_tile(kDeterministicRows);
    return Tiling{blocks(rows, w), blocks(cols, column_tile_), column_tile_, w};
  }
  return Tiling{blocks(rows, kDeterministicRows), blocks(cols, column_tile_), column_tile_};
}

CpuBackend::Tiling CpuBackend::channel_tiling(int rows, int cols, int nt) const {
  Tiling t = tiling(rows, cols, nt, true);
  if (deterministic_) {
    t.rows = std::max(1, (rows + column_tile_ - 1) / column_tile_);
    t.row_width = column_tile_;
  }
  return t;
}

void CpuBackend::matmul_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  const int N = static_cast<int>(inp.rows()), C = static_cast<int>(inp.cols());
  const int OC = static_cast<int>(weight.dim(0));
  if (products_ == Dtype::bf16) return onednn_forward(out, inp, weight, bias);
  expect_f32(inp, "matmul_forward: a bf16 input needs the bf16 products (train.precision bf16)");
  if (N < kFewRows) {
    // Few rows (generation's one-token decode): the work is reading the
    // weight matrix once, so threads split its rows (the output columns)
    // and each streams its slab through GEMV.
#pragma omp parallel num_threads(threads_)
    {
      const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
      const Tiling tl = tiling(1, OC, nt, false);
      for (int t = tid; t < tl.count(); t += nt) {
        const int j0 = tl.col0(OC, t), outs = tl.ncols(OC, t);
        for (int i = 0; outs > 0 && i < N; ++i) {
          float* o = out.data + static_cast<int64_t>(i) * OC + j0;
          for (int j = 0; j < outs; ++j) o[j] = bias.empty() ? 0.0f : bias.data[j0 + j];
          cblas_sgemv(CblasRowMajor, CblasNoTrans, outs, C, 1.0f, weight.data + static_cast<int64_t>(j0) * C, C,
                      inp.data + static_cast<int64_t>(i) * C, 1, 1.0f, o, 1);
        }
      }
    }
    return;
  }
  // out[rows, outs] = inp[rows] (rows,C) @ weight[outs]^T (C,outs) [+ bias], tile by tile
  tiled_product(out.data, inp.data, C, weight.data, C, false, N, OC, C, bias.empty() ? nullptr : bias.data);
}

void CpuBackend::matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                 Tensor weight) {
  const int N = static_cast<int>(inp.rows()), C = static_cast<int>(inp.cols());
  const int OC = static_cast<int>(weight.dim(0));
  if (pieces_.on() && (dweight.data != nullptr || dbias.data != nullptr)) {  // the pair trees (pieces.cpp)
    matmul_weight_pieces(dweight, dbias, dout, inp);
    dweight = Tensor{};
    dbias = Tensor{};
  }
  if (products_ == Dtype::bf16) {  // the two products in bf16; the bias gradient below, in fp32 as always
    onednn_backward(dinp, dweight, dout, inp, weight);
    dinp = Tensor{};
    dweight = Tensor{};
  } else {
    expect_f32(inp, "matmul_backward: a bf16 input needs the bf16 products (train.precision bf16)");
  }
#pragma omp parallel num_threads(threads_)
  {
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    // dinp[rows, cols] = dout[rows] (rows,OC) @ weight[:, cols] (OC,cols)
    const Tiling ti = tiling(N, C, nt, true);
    for (int t = tid; dinp.data != nullptr && t < ti.count(); t += nt) {
      const int r = t / ti.cols, c = t % ti.cols;
      const int i0 = ti.row0(N, r), rows = ti.nrows(N, r);
      const int k0 = ti.col0(C, c), cols = ti.ncols(C, c);
      if (rows > 0 && cols > 0) {
        gemm_.run(tid, Sgemm{false, false, rows, cols, OC, 1.0f, dout.data + static_cast<int64_t>(i0) * OC, OC,
                             weight.data + k0, C, 0.0f, dinp.data + static_cast<int64_t>(i0) * C + k0, C});
      }
    }
    // dweight[outs, cols] += dout[:, outs]^T (outs,N) @ inp[:, cols] (N,cols)
    const Tiling tw = channel_tiling(OC, C, nt);  // dweight's rows are the output channels
    for (int t = tid; dweight.data != nullptr && t < tw.count(); t += nt) {
      const int r = t / tw.cols, c = t % tw.cols;
      const int j0 = tw.row0(OC, r), outs = tw.nrows(OC, r);
      const int k0 = tw.col0(C, c), cols = tw.ncols(C, c);
      if (outs > 0 && cols > 0) {
        gemm_.run(tid, Sgemm{true, false, outs, cols, N, 1.0f, dout.data + j0, OC, inp.data + k0, C, 1.0f,
                             dweight.data + static_cast<int64_t>(j0) * C + k0, C});
      }
    }
    // dbias[outs] += column sums of dout[:, outs] (each column in row order)
    const Tiling tb = tiling(1, OC, nt, false);
    for (int t = tid; !dbias.empty() && t < tb.count(); t += nt) {
      const int j0 = tb.col0(OC, t), outs = tb.ncols(OC, t);
      for (int i = 0; i < N; ++i) {
        const float* d = dout.data + static_cast<int64_t>(i) * OC;
#pragma omp simd
        for (int j = j0; j < j0 + outs; ++j) dbias.data[j] += d[j];
      }
    }
  }
}

void CpuBackend::onednn_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  const int N = static_cast<int>(inp.rows()), C = static_cast<int>(inp.cols());
  const int OC = static_cast<int>(weight.dim(0));
  onednn_->forward(out.data, as_bf16(bf16_a_, inp), as_bf16(bf16_b_, weight), bias.empty() ? nullptr : bias.data, N,
                   C, OC);
}

void CpuBackend::onednn_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight) {
  const int N = static_cast<int>(inp.rows()), C = static_cast<int>(inp.cols());
  const int OC = static_cast<int>(weight.dim(0));
  if (dinp.data == nullptr && dweight.data == nullptr) return;
  const bf16* d = as_bf16(bf16_a_, dout);
  if (dinp.data != nullptr) onednn_->backward_input(dinp.data, d, as_bf16(bf16_b_, weight), N, C, OC);
  if (dweight.data != nullptr) onednn_->backward_weight(dweight.data, d, as_bf16(bf16_c_, inp), N, C, OC);
}

void CpuBackend::tiled_product(float* out, const float* A, int lda, const float* B, int ldb, bool b_rows, int N,
                               int M, int k, const float* bias) {
#pragma omp parallel num_threads(threads_)
  {
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const Tiling tl = tiling(N, M, nt, true);
    for (int t = tid; t < tl.count(); t += nt) {
      const int r = t / tl.cols, c = t % tl.cols;
      const int i0 = tl.row0(N, r), rows = tl.nrows(N, r);
      const int j0 = tl.col0(M, c), cols = tl.ncols(M, c);
      if (rows <= 0 || cols <= 0) continue;
      float* o = out + static_cast<int64_t>(i0) * M + j0;
      if (bias != nullptr) {  // as matmul_forward: the bias filled in, then beta 1
        for (int i = 0; i < rows; ++i) std::copy_n(bias + j0, cols, o + static_cast<int64_t>(i) * M);
      }
      // out[rows, cols] (+)= A[rows] (rows,k) @ (B rows j0.. transposed, or B's columns j0..)
      gemm_.run(tid, Sgemm{false, !b_rows, rows, cols, k, 1.0f, A + static_cast<int64_t>(i0) * lda, lda,
                           b_rows ? B + j0 : B + static_cast<int64_t>(j0) * ldb, ldb, bias != nullptr ? 1.0f : 0.0f,
                           o, M});
    }
  }
}

void CpuBackend::inner_tree(float* out, const float* A, int lda, const float* B, int ldb, bool b_rows, int N, int M,
                            std::span<const int64_t> segments, int groups, const float* bias) {
  if (groups < 1 || (groups & (groups - 1)) != 0 || segments.empty()) {
    throw std::invalid_argument(fmt::format("inner_tree: {} groups (a power of two) of {} segments", groups,
                                            segments.size()));
  }
  for (int64_t s : segments) {
    if (s <= 0 || s % groups != 0) {
      throw std::invalid_argument(fmt::format("inner_tree: a segment of {} is not {} equal pieces", s, groups));
    }
  }
  int levels = 1;
  for (int g = 1; g < groups; g <<= 1) ++levels;
  const size_t n = static_cast<size_t>(N) * static_cast<size_t>(M);
  while (tree_buffers_.size() < static_cast<size_t>(levels) + 1) tree_buffers_.emplace_back();
  for (Buffer& b : tree_buffers_) {
    if (b.size() < n) b = Buffer(n);
  }
  float* piece = tree_buffers_.back().data();
  const auto add_into = [&](float* dst, const float* src, size_t count) {
    const Tensor d(dst, {static_cast<int64_t>(count)});
    residual_forward(d, d, Tensor(const_cast<float*>(src), {static_cast<int64_t>(count)}));
  };
  // Piece (g, s): columns [offset of s + g w_s, + w_s) of A, and the same rows (or columns) of B.
  const auto group_into = [&](float* dst, int g) {
    int64_t off = 0;
    for (size_t s = 0; s < segments.size(); ++s) {
      const int64_t w = segments[s] / groups, k0 = off + g * w;
      const float* b = b_rows ? B + k0 * ldb : B + k0;
      // The bias (forward, this shard's first group being the tree's first) joins the first piece's product.
      tiled_product(s == 0 ? dst : piece, A + k0, lda, b, ldb, b_rows, N, M, static_cast<int>(w),
                    g == 0 && s == 0 ? bias : nullptr);
      if (s > 0) add_into(dst, piece, n);
      off += segments[s];
    }
  };
  // Groups [lo, lo + count) into tree level `level` (the left half stays there, the right goes one deeper).
  const auto subtree = [&](const auto& self, int lo, int count, int level, float* dst) -> void {
    if (count == 1) {
      group_into(dst, lo);
      return;
    }
    self(self, lo, count / 2, level + 1, dst);
    float* right = tree_buffers_[static_cast<size_t>(level)].data();
    self(self, lo + count / 2, count / 2, level + 1, right);
    add_into(dst, right, n);
  };
  subtree(subtree, 0, groups, 0, out);
}

void CpuBackend::matmul_forward_tree(Tensor out, Tensor inp, Tensor weight, Tensor bias,
                                     std::span<const int64_t> segments, int groups) {
  const int N = static_cast<int>(inp.rows()), K = static_cast<int>(inp.cols());
  const int OC = static_cast<int>(weight.dim(0));
  expect_f32(inp, "matmul_forward_tree: fp32 only");
  inner_tree(out.data, inp.data, K, weight.data, K, false, N, OC, segments, groups, bias.empty() ? nullptr : bias.data);
}

void CpuBackend::matmul_backward_input_tree(Tensor dinp, Tensor dout, Tensor weight, std::span<const int64_t> segments,
                                            int groups) {
  const int N = static_cast<int>(dout.rows()), OC = static_cast<int>(dout.cols());
  const int C = static_cast<int>(weight.dim(1));
  inner_tree(dinp.data, dout.data, OC, weight.data, C, true, N, C, segments, groups, nullptr);
}

}  // namespace gpt2::cpu
