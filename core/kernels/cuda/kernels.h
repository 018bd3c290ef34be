// Launchers of the CUDA backend's own kernels (everything but the GEMMs,
// which go through cuBLAS in cuda_backend.cpp). Plain C++ declarations, so
// host code compiled by g++ can call them; the definitions are in kernels.cu
// and (attention) attention.cu.
//
// Every pointer is DEVICE memory. Every launcher only enqueues work on
// `stream` and returns: no synchronisation, no allocation. Shapes and
// accumulation rules are those of backend.h (parameter gradients +=,
// layernorm's and rmsnorm's dinp +=, all other outputs =). Letters: B batch,
// T time, C channels, NH query heads (HS = C / NH), KVH key/value heads,
// V vocabulary, N = B * T rows, H SwiGLU hidden width.
// The per-element and per-row arithmetic lives in device_math.h, shared with
// the host tests.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/backend.h"  // AdamCoefficients

namespace gpt2::cuda {

// out (N,C) = wte[tokens[n]] + wpe[n % T].
void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int N, int T, int C,
                     cudaStream_t stream);
// dwpe (T,C) += sum over b of dout (B,T,C).
void encoder_backward_wpe(float* dwpe, const float* dout, int B, int T, int C, cudaStream_t stream);
// dwte += dout rows grouped by token, deterministically: the host sorts the
// positions by token (stable); bucket i holds token bucket_token[i] and the
// positions order[starts[i] .. starts[i+1]) (ascending), summed in that order.
void encoder_backward_wte(float* dwte, const float* dout, const int32_t* bucket_token, const int32_t* starts,
                          const int32_t* order, int num_buckets, int C, cudaStream_t stream);

// Per row: out = (x - mean) * rstd * weight + bias, eps 1e-5; mean, rstd (N).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, cudaStream_t stream);
// dinp (N,C) +=; dweight, dbias (C) +=. `scratch` holds
// layernorm_backward_scratch_floats(N, C) floats (partial column sums).
size_t layernorm_backward_scratch_floats(int N, int C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, float* scratch, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd, int N, int C,
                        cudaStream_t stream);

// Per row: out = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + 1e-5); rstd (N).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     cudaStream_t stream);
// dinp (N,C) +=; dweight (C) +=. `scratch` holds
// rmsnorm_backward_scratch_floats(N, C) floats (partial column sums).
size_t rmsnorm_backward_scratch_floats(int N, int C);
void rmsnorm_backward(float* dinp, float* dweight, float* scratch, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C, cudaStream_t stream);

// out[i] = bf16 bits of in[i] (dm::bf16_bits), i < n: a product's operands
// under train.precision bf16.
void to_bf16(uint16_t* out, const float* in, int64_t n, cudaStream_t stream);

// out (N,OC) += bias (OC) on every row (after the cuBLAS product).
void add_bias(float* out, const float* bias, int N, int OC, cudaStream_t stream);
// dbias (OC) += column sums of dout (N,OC). `scratch` holds
// bias_backward_scratch_floats(N, OC) floats.
size_t bias_backward_scratch_floats(int N, int OC);
void bias_backward(float* dbias, float* scratch, const float* dout, int N, int OC, cudaStream_t stream);

// The head size HS = C / NH the attention kernels take: a multiple of 32, at
// most 128. Throws std::invalid_argument naming `op` and the sizes otherwise
// (the attention launchers' front door).
int attention_head_size(const char* op, int C, int NH);

// Grouped-query attention: qkv rows are (NH + 2 KVH) HS wide (NH query
// heads, then KVH key heads, then KVH value heads); query head h reads
// key/value head h / (NH / KVH). C = NH * HS is out's width. Throws
// std::invalid_argument where KVH does not divide NH (besides the head-size
// rule above); KVH = NH is plain multi-head attention (qkv rows 3C wide).
//
// Causal attention over qkv for the query rows t in [first_row, T) of each
// sequence: out has B * (T - first_row) rows of C; lse (B,NH,T-first_row)
// receives the log-sum-exp of each scaled score row, or is skipped when nullptr.
// first_row = 0 is the training forward; first_row = T - 1 with B = 1 is the
// one-query decode against a KV cache. Scale 1/sqrt(HS).
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int KVH,
                       int first_row, cudaStream_t stream);
// dqkv = from dout and the forward's out, lse, qkv; a key/value head's
// gradient sums its group's query heads in head order. `scratch` holds
// attention_backward_scratch_floats(B, T, NH) floats.
size_t attention_backward_scratch_floats(int B, int T, int NH);
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* out, const float* lse,
                        const float* qkv, int B, int T, int C, int NH, int KVH, cudaStream_t stream);

// RoPE in place on the NH query and KVH key heads of qkv (B,T,(NH+2KVH)HS),
// row t at position pos0 + t (dm::rope_cos_sin); inverse = true is the
// backward (rotation by minus the angle). Value heads are not touched.
void rope(float* qkv, int B, int T, int NH, int KVH, int HS, int pos0, float theta, bool inverse,
          cudaStream_t stream);

// GELU (tanh form); dinp = dout * gelu'(inp), dinp may alias dout.
void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream);
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n, cudaStream_t stream);

// ReLU and SiLU; their backwards allow dinp to alias dout or inp.
void relu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream);
void relu_backward(float* dinp, const float* dout, const float* inp, int64_t n, cudaStream_t stream);
void silu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream);
void silu_backward(float* dinp, const float* dout, const float* inp, int64_t n, cudaStream_t stream);
// SwiGLU: inp (N,2H) holds per row the gate (first H) and up (last H);
// out (N,H) = silu(gate) * up; dinp (N,2H) = (dgate, dup), no aliasing.
void swiglu_forward(float* out, const float* inp, int N, int H, cudaStream_t stream);
void swiglu_backward(float* dinp, const float* dout, const float* inp, int N, int H, cudaStream_t stream);

// out = a + b.
void residual_forward(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream);

// losses (N) = -log softmax(logits (N,V))[targets[n]].
void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V,
                          cudaStream_t stream);
// dlogits = dloss * (softmax(logits) - onehot(target)); may alias logits.
void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, float dloss, int N, int V,
                           cudaStream_t stream);
// The vocabulary-parallel cross-entropy (backend.h): logits (N,W) hold the
// columns [v0, v0 + W) of the (N, vocab) logits; parts (P+1, N).
void crossentropy_shard_stats(float* lse, float* target_logit, const float* logits, const int32_t* targets, int N,
                              int W, int64_t v0, int64_t vocab, cudaStream_t stream);
void crossentropy_shard_combine(float* losses, float* lse, const float* parts, int P, int N, cudaStream_t stream);
void crossentropy_shard_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                                 float dloss, int N, int W, int64_t v0, int64_t vocab, cudaStream_t stream);

// One Adam/AdamW update of n elements (coefficients as backend.h).
void adam_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamCoefficients& k,
                 cudaStream_t stream);

// *result (device, one double) = sum of x (square = false) or of x^2 (true),
// accumulated in double. `scratch` holds reduce_scratch_doubles() doubles.
size_t reduce_scratch_doubles();
void reduce_sum(double* result, double* scratch, const float* x, int64_t n, bool square, cudaStream_t stream);

}  // namespace gpt2::cuda
