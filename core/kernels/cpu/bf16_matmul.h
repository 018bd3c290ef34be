// Matrix products with bf16 inputs and fp32 accumulation and outputs, through
// oneDNN's matmul (the library PyTorch's CPU path runs bf16 with): the CPU
// backend's building block for train.precision bf16 (DESIGN.md "Precision",
// issue 30). Shapes use the letters of kernels/backend.h: the three products
// of a linear layer, weight (OC,C) row-major as the model keeps it.
//
// A primitive is made once per shape and kept (oneDNN chooses its kernel
// then: impl_info); later calls at that shape allocate nothing. On a CPU
// with AVX512-BF16 oneDNN runs native bf16 dot products; on other AVX-512
// CPUs it converts, with the same results up to the order of its fp32 sums.
// oneDNN 2.6 has no bf16 matmul below AVX-512: on an AVX2-only CPU the
// operands are widened to fp32 (exactly) and OpenBLAS's SGEMM runs the
// product in fixed tiles of output rows (impl_info says so).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/bf16.h"

namespace gpt2::cpu {

class Bf16Matmul {
 public:
  // `threads`: the OpenMP threads oneDNN runs on.
  explicit Bf16Matmul(int threads = 1);
  ~Bf16Matmul();
  Bf16Matmul(const Bf16Matmul&) = delete;
  Bf16Matmul& operator=(const Bf16Matmul&) = delete;

  // out (N,OC) = inp (N,C) weight (OC,C)^T + bias (OC, fp32; nullptr: none).
  void forward(float* out, const bf16* inp, const bf16* weight, const float* bias, int64_t N, int64_t C, int64_t OC);
  // dinp (N,C) = dout (N,OC) weight (OC,C).
  void backward_input(float* dinp, const bf16* dout, const bf16* weight, int64_t N, int64_t C, int64_t OC);
  // dweight (OC,C) += dout (N,OC)^T inp (N,C) (accumulated, as the Backend contract's weight gradients).
  void backward_weight(float* dweight, const bf16* dout, const bf16* inp, int64_t N, int64_t C, int64_t OC);

  // The implementation oneDNN chose for the last product run, e.g.
  // "brg:avx512_core_bf16" (native bf16) or "gemm:jit" (conversions); "" before any;
  // "openblas sgemm on bf16 values (...)" where oneDNN has no bf16 matmul.
  std::string impl_info() const;
  // oneDNN's version, "2.6.3", for provenance.
  static std::string library_version();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A product of two strided bf16 matrices into fp32, run on the calling
// thread alone: the attention's tile products (kernels/cpu/attention.cpp)
// under train.precision bf16. Each of the backend's threads owns one, inside
// its OpenMP region (oneDNN then runs sequentially). An operand is given by
// its row and column strides, so a transposed operand is the same array
// with the two strides swapped.
//   dst (m,n), rows ldd apart, = alpha A (m,k) B (k,n) [+ dst when accumulate]
// A primitive is made once per (shape, strides, alpha, accumulate) and kept.
// Call it from inside an OpenMP parallel region (a team of one included): it
// sets the calling task's thread count to 1, so oneDNN runs on that thread.
class Bf16TileGemm {
 public:
  struct Operand {
    const bf16* data;
    int64_t row_stride, col_stride;
  };
  Bf16TileGemm();
  ~Bf16TileGemm();
  Bf16TileGemm(const Bf16TileGemm&) = delete;
  Bf16TileGemm& operator=(const Bf16TileGemm&) = delete;
  void run(float* dst, int64_t ldd, Operand a, Operand b, int64_t m, int64_t n, int64_t k, float alpha,
           bool accumulate);
  // The implementation oneDNN chose for the last product, e.g. "gemm:jit".
  std::string impl_info() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpt2::cpu
