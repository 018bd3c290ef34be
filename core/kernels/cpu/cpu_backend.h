// The optimised CPU backend: GEMMs through CBLAS (single-threaded OpenBLAS
// called on slabs of the output from each thread), every other kernel a
// vectorisable loop; all parallelised with OpenMP over `threads` threads.
// Reductions across threads go through per-thread partials summed in thread
// order, so results are bit-identical run to run for a given thread count.
#pragma once

#include "kernels/backend.h"
#include "kernels/buffer.h"

namespace gpt2::cpu {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads);
  std::string name() const override { return "cpu"; }
  int threads() const { return threads_; }

  void zero(Tensor x) override;
  void copy(Tensor dst, Tensor src) override;

  void encoder_forward(Tensor out, const int32_t* tokens, Tensor wte, Tensor wpe) override;
  void encoder_backward(Tensor dwte, Tensor dwpe, Tensor dout, const int32_t* tokens) override;
  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                         Tensor bias) override;
  void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                          Tensor weight, Tensor mean, Tensor rstd) override;
  void matmul_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) override;
  void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                       Tensor weight) override;
  void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight) override;
  void rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight,
                        Tensor rstd) override;
  void attention_forward(Tensor out, Tensor lse, Tensor qkv, int NH, int KVH) override;
  void attention_backward(Tensor dqkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv, int NH,
                          int KVH) override;
  void attention_decode(Tensor out, Tensor qkv, int NH, int KVH) override;
  void rope_forward(Tensor qkv, int NH, int KVH, int pos0, float theta) override;
  void rope_backward(Tensor dqkv, int NH, int KVH, int pos0, float theta) override;
  void gelu_forward(Tensor out, Tensor inp) override;
  void gelu_backward(Tensor dinp, Tensor dout, Tensor inp) override;
  void relu_forward(Tensor out, Tensor inp) override;
  void relu_backward(Tensor dinp, Tensor dout, Tensor inp) override;
  void silu_forward(Tensor out, Tensor inp) override;
  void silu_backward(Tensor dinp, Tensor dout, Tensor inp) override;
  void swiglu_forward(Tensor out, Tensor inp) override;
  void swiglu_backward(Tensor dinp, Tensor dout, Tensor inp) override;
  void residual_forward(Tensor out, Tensor a, Tensor b) override;
  void crossentropy_forward(Tensor losses, Tensor logits, const int32_t* targets) override;
  void crossentropy_backward(Tensor dlogits, Tensor logits, const int32_t* targets,
                             float dloss) override;
  void crossentropy_shard_stats(Tensor lse, Tensor target_logit, Tensor logits, const int32_t* targets, int64_t v0,
                                int64_t vocab) override;
  void crossentropy_shard_combine(Tensor losses, Tensor lse, Tensor parts) override;
  void crossentropy_shard_backward(Tensor dlogits, Tensor logits, Tensor lse, const int32_t* targets, int64_t v0,
                                   int64_t vocab, float dloss) override;
  void adam_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamCoefficients& k) override;
  double sum_squares(Tensor x) override;
  double sum(Tensor x) override { return sum_in_order(x); }

 private:
  // Scratch of at least n floats, reused across calls. It grows (allocates)
  // only when a larger shape than any before is seen: the first step.
  float* scratch(size_t n);

  int threads_;
  Buffer scratch_;
};

}  // namespace gpt2::cpu
