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
// train.deterministic: a dimension is cut into blocks of this many, whatever
// the thread count, and threads take blocks in turn. An OpenBLAS product's
// result for one element can depend on the size of the product it sits in
// (its small-matrix kernels), so the blocks, not the threads, fix the sizes.
constexpr int kDeterministicBlock = 256;
}  // namespace

// The parts a dimension of n is cut into when nt threads share it: one per
// thread, or (deterministic_) fixed blocks.
int CpuBackend::parts_of(int n, int nt) const {
  return deterministic_ ? std::max(1, (n + kDeterministicBlock - 1) / kDeterministicBlock) : nt;
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
  if (N < kFewRows && !deterministic_) {
    // Few rows (generation's one-token decode): the work is reading the
    // weight matrix once, so threads split its rows (the output columns)
    // and each streams its slab through GEMV.
#pragma omp parallel num_threads(threads_)
    {
      const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
      const int j0 = slab(OC, nt, tid), outs = slab(OC, nt, tid + 1) - j0;
      for (int i = 0; outs > 0 && i < N; ++i) {
        float* o = out.data + static_cast<int64_t>(i) * OC + j0;
        for (int j = 0; j < outs; ++j) o[j] = bias.empty() ? 0.0f : bias.data[j0 + j];
        cblas_sgemv(CblasRowMajor, CblasNoTrans, outs, C, 1.0f, weight.data + static_cast<int64_t>(j0) * C, C,
                    inp.data + static_cast<int64_t>(i) * C, 1, 1.0f, o, 1);
      }
    }
    return;
  }
#pragma omp parallel num_threads(threads_)
  {
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num(), parts = parts_of(N, nt);
    for (int part = tid; part < parts; part += nt) {
      const int i0 = slab(N, parts, part), rows = slab(N, parts, part + 1) - i0;
      float* o = out.data + static_cast<int64_t>(i0) * OC;
      float beta = 0.0f;
      if (!bias.empty()) {
        for (int i = 0; i < rows; ++i) {
#pragma omp simd
          for (int j = 0; j < OC; ++j) o[static_cast<int64_t>(i) * OC + j] = bias.data[j];
        }
        beta = 1.0f;
      }
      // out[rows] (rows,OC) = inp[rows] (rows,C) @ weight^T (C,OC) [+ bias]
      if (rows > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, OC, C, 1.0f,
                    inp.data + static_cast<int64_t>(i0) * C, C, weight.data, C, beta, o, OC);
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
    // dinp[rows] (rows,C) = dout[rows] (rows,OC) @ weight (OC,C)
    const int row_parts = parts_of(N, nt);
    for (int part = tid; dinp.data != nullptr && part < row_parts; part += nt) {
      const int i0 = slab(N, row_parts, part), rows = slab(N, row_parts, part + 1) - i0;
      if (rows > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, C, OC, 1.0f,
                    dout.data + static_cast<int64_t>(i0) * OC, OC, weight.data, C, 0.0f,
                    dinp.data + static_cast<int64_t>(i0) * C, C);
      }
    }
    const int col_parts = parts_of(OC, nt);
    for (int part = tid; part < col_parts; part += nt) {
      // dweight[outs] (outs,C) += dout[:, outs]^T (outs,N) @ inp (N,C)
      const int j0 = slab(OC, col_parts, part), outs = slab(OC, col_parts, part + 1) - j0;
      if (outs > 0 && dweight.data != nullptr) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, outs, C, N, 1.0f, dout.data + j0, OC,
                    inp.data, C, 1.0f, dweight.data + static_cast<int64_t>(j0) * C, C);
      }
      // dbias[outs] += column sums of dout[:, outs]
      if (!dbias.empty()) {
        for (int i = 0; i < N; ++i) {
          const float* d = dout.data + static_cast<int64_t>(i) * OC;
#pragma omp simd
          for (int j = j0; j < j0 + outs; ++j) dbias.data[j] += d[j];
        }
      }
    }
  }
}

}  // namespace gpt2::cpu
