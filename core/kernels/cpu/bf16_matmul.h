// Matrix products with bf16 inputs and fp32 accumulation and outputs, through
// oneDNN's matmul (the library PyTorch's CPU path runs bf16 with): the CPU
// backend's building block for train.precision bf16 (DESIGN.md "Precision",
// issue 30). Shapes use the letters of kernels/backend.h: the three products
// of a linear layer, weight (OC,C) row-major as the model keeps it.
//
// A primitive is made once per shape and kept (oneDNN chooses its kernel
// then: impl_info); later calls at that shape allocate nothing. On a CPU
// with AVX512-BF16 oneDNN runs native bf16 dot products; elsewhere it
// converts, with the same results up to the order of its fp32 sums.
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
  // "brg:avx512_core_bf16" (native bf16) or "gemm:jit" (conversions); "" before any.
  std::string impl_info() const;
  // oneDNN's version, "2.6.3", for provenance.
  static std::string library_version();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpt2::cpu
