// Matmul (linear layer) on the CPU. OpenBLAS runs single-threaded and the
// GEMMs are split across our OpenMP threads into disjoint slabs of the
// output: one thread pool for the whole backend (no two pools fighting over
// the cores), a fixed partition (bit-identical results run to run), and no
// heap traffic (OpenBLAS 0.3.21's threaded GEMM driver mallocs a job array
// on every call; its single-threaded path does not).
// The bias is folded in by filling `out` with it and asking SGEMM for
// beta = 1, which saves a second pass over the output.
#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "kernels/cpu/cpu_backend.h"

namespace gpt2::cpu {

namespace {
// [begin, end) of part `i` of `n` items split in `parts` near-equal slabs.
inline int slab(int n, int parts, int i) { return static_cast<int>(int64_t{n} * i / parts); }
// Below this many rows the forward matmul is a few GEMVs split by output column.
constexpr int kFewRows = 8;
// train.deterministic: a product's output is cut into tiles of at most this
// many a side, whatever the thread count, and threads take tiles in turn. An
// OpenBLAS product's result for one element can depend on the size of the
// product it sits in (its small-matrix kernels), so the tiles, not the
// threads, fix the sizes.
constexpr int kDeterministicBlock = 256;
}  // namespace

// The tiles a product's output (rows x cols) is cut into when nt threads
// share it. By default one slab per thread along the dimension the product
// splits (`by_rows`); under deterministic_ fixed blocks both ways, whatever
// the thread count, which threads take in turn (tile t = (t / cols, t % cols)).
CpuBackend::Tiling CpuBackend::tiling(int rows, int cols, int nt, bool by_rows) const {
  if (!deterministic_) return by_rows ? Tiling{nt, 1} : Tiling{1, nt};
  const auto blocks = [](int n) { return std::max(1, (n + kDeterministicBlock - 1) / kDeterministicBlock); };
  return Tiling{blocks(rows), blocks(cols)};
}

void CpuBackend::matmul_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  const int N = static_cast<int>(inp.rows()), C = static_cast<int>(inp.cols());
  const int OC = static_cast<int>(weight.dim(0));
  if (bf16_) {  // train.precision bf16: the operands rounded to bf16, the sums in fp32 (oneDNN)
    bf16_->forward(out.data, as_bf16(bf16_a_, inp), as_bf16(bf16_b_, weight), bias.empty() ? nullptr : bias.data, N,
                   C, OC);
    return;
  }
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
        const int j0 = slab(OC, tl.cols, t), outs = slab(OC, tl.cols, t + 1) - j0;
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
#pragma omp parallel num_threads(threads_)
  {
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const Tiling tl = tiling(N, OC, nt, true);
    for (int t = tid; t < tl.count(); t += nt) {
      const int r = t / tl.cols, c = t % tl.cols;
      const int i0 = slab(N, tl.rows, r), rows = slab(N, tl.rows, r + 1) - i0;
      const int j0 = slab(OC, tl.cols, c), outs = slab(OC, tl.cols, c + 1) - j0;
      float* o = out.data + static_cast<int64_t>(i0) * OC + j0;
      float beta = 0.0f;
      if (!bias.empty()) {
        for (int i = 0; i < rows; ++i) {
#pragma omp simd
          for (int j = 0; j < outs; ++j) o[static_cast<int64_t>(i) * OC + j] = bias.data[j0 + j];
        }
        beta = 1.0f;
      }
      // out[rows, outs] = inp[rows] (rows,C) @ weight[outs]^T (C,outs) [+ bias]
      if (rows > 0 && outs > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, outs, C, 1.0f,
                    inp.data + static_cast<int64_t>(i0) * C, C, weight.data + static_cast<int64_t>(j0) * C, C, beta, o,
                    OC);
      }
    }
  }
}

void CpuBackend::matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                 Tensor weight) {
  const int N = static_cast<int>(inp.rows()), C = static_cast<int>(inp.cols());
  const int OC = static_cast<int>(weight.dim(0));
  if (bf16_) {  // the two products in bf16 (oneDNN); the bias gradient below, in fp32 as always
    const bf16* d = (dinp.data != nullptr || dweight.data != nullptr) ? as_bf16(bf16_a_, dout) : nullptr;
    if (dinp.data != nullptr) bf16_->backward_input(dinp.data, d, as_bf16(bf16_b_, weight), N, C, OC);
    if (dweight.data != nullptr) bf16_->backward_weight(dweight.data, d, as_bf16(bf16_c_, inp), N, C, OC);
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
      const int i0 = slab(N, ti.rows, r), rows = slab(N, ti.rows, r + 1) - i0;
      const int k0 = slab(C, ti.cols, c), cols = slab(C, ti.cols, c + 1) - k0;
      if (rows > 0 && cols > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, cols, OC, 1.0f,
                    dout.data + static_cast<int64_t>(i0) * OC, OC, weight.data + k0, C, 0.0f,
                    dinp.data + static_cast<int64_t>(i0) * C + k0, C);
      }
    }
    // dweight[outs, cols] += dout[:, outs]^T (outs,N) @ inp[:, cols] (N,cols)
    const Tiling tw = tiling(OC, C, nt, true);  // dweight's rows are the output channels
    for (int t = tid; dweight.data != nullptr && t < tw.count(); t += nt) {
      const int r = t / tw.cols, c = t % tw.cols;
      const int j0 = slab(OC, tw.rows, r), outs = slab(OC, tw.rows, r + 1) - j0;
      const int k0 = slab(C, tw.cols, c), cols = slab(C, tw.cols, c + 1) - k0;
      if (outs > 0 && cols > 0) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, outs, cols, N, 1.0f, dout.data + j0, OC,
                    inp.data + k0, C, 1.0f, dweight.data + static_cast<int64_t>(j0) * C + k0, C);
      }
    }
    // dbias[outs] += column sums of dout[:, outs] (each column in row order)
    const Tiling tb = tiling(1, OC, nt, false);
    for (int t = tid; !dbias.empty() && t < tb.count(); t += nt) {
      const int j0 = slab(OC, tb.cols, t), outs = slab(OC, tb.cols, t + 1) - j0;
      for (int i = 0; i < N; ++i) {
        const float* d = dout.data + static_cast<int64_t>(i) * OC;
#pragma omp simd
        for (int j = j0; j < j0 + outs; ++j) dbias.data[j] += d[j];
      }
    }
  }
}

}  // namespace gpt2::cpu
