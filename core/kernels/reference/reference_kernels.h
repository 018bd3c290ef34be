// Naive reference kernels: the algorithmic definition of every op, written as
// plain loops that follow the formulas. Templated on the scalar so the tests
// can run them in double (finite differences) as well as float (the oracle
// for the optimised backends). No threads, no tricks; never fast.
// Sizes: B batch, T time, C channels, NH heads, KVH key/value heads, HS head
// size, V vocab, N rows, OC out channels, H SwiGLU hidden width.
// Accumulation rules are those of backend.h.
#pragma once

#include <cstdint>

namespace gpt2::ref {

template <typename R>
void encoder_forward(R* out, const int32_t* tokens, const R* wte, const R* wpe, int B, int T, int C);
template <typename R>
void encoder_backward(R* dwte, R* dwpe, const R* dout, const int32_t* tokens, int B, int T, int C);

template <typename R>
void layernorm_forward(R* out, R* mean, R* rstd, const R* inp, const R* weight, const R* bias, int N,
                       int C);
template <typename R>
void layernorm_backward(R* dinp, R* dweight, R* dbias, const R* dout, const R* inp, const R* weight,
                        const R* mean, const R* rstd, int N, int C);

template <typename R>
void rmsnorm_forward(R* out, R* rstd, const R* inp, const R* weight, int N, int C);
template <typename R>
void rmsnorm_backward(R* dinp, R* dweight, const R* dout, const R* inp, const R* weight, const R* rstd, int N,
                      int C);

template <typename R>
void matmul_forward(R* out, const R* inp, const R* weight, const R* bias, int N, int C, int OC);
template <typename R>
void matmul_backward(R* dinp, R* dweight, R* dbias, const R* dout, const R* inp, const R* weight,
                     int N, int C, int OC);

// Grouped-query attention: C = NH * HS is out's width, qkv rows are
// (NH + 2 KVH) HS wide (backend.h). Builds each (T,T) score row in full;
// backward ignores the forward's out and lse and recomputes the
// probabilities from q and k.
template <typename R>
void attention_forward(R* out, R* lse, const R* qkv, int B, int T, int C, int NH, int KVH);
template <typename R>
void attention_backward(R* dqkv, const R* dout, const R* qkv, int B, int T, int C, int NH, int KVH);

// Only the last query row t = P-1 of (1,P,(NH+2KVH)HS): out (C).
template <typename R>
void attention_decode(R* out, const R* qkv, int P, int C, int NH, int KVH);

// Multi-head attention (KVH = NH, qkv rows 3C wide).
template <typename R>
void attention_forward(R* out, R* lse, const R* qkv, int B, int T, int C, int NH) {
  attention_forward(out, lse, qkv, B, T, C, NH, NH);
}
template <typename R>
void attention_backward(R* dqkv, const R* dout, const R* qkv, int B, int T, int C, int NH) {
  attention_backward(dqkv, dout, qkv, B, T, C, NH, NH);
}
template <typename R>
void attention_decode(R* out, const R* qkv, int P, int C, int NH) {
  attention_decode(out, qkv, P, C, NH, NH);
}

// Context parallelism's ring attention (backend.h, attention_block_*): the
// query heads of qkv (N,L,(NH+2KVH)HS) against one block of keys and values
// kv (N,L,2 KVH HS: the KVH key heads, then the KVH value heads), row t of
// the queries seeing key s when s <= t (`causal`: the same chunk) or every
// key (an earlier chunk). Forward: the block's output and log-sum-exp merged
// into out (N,L,C) and lse (N,NH,L) by their log-sum-exps (`merge`), or
// written (the query block's first). Backward, given the final out and lse
// of every block merged: dqkv's query columns += and dkv (N,L,2 KVH HS) +=
// the block's share of the gradient.
template <typename R>
void attention_block_forward(R* out, R* lse, const R* qkv, const R* kv, int N, int L, int C, int NH, int KVH,
                             bool causal, bool merge);
template <typename R>
void attention_block_backward(R* dqkv, R* dkv, const R* dout, const R* out, const R* lse, const R* qkv,
                              const R* kv, int N, int L, int C, int NH, int KVH, bool causal);

// RoPE in place on the NH query and KVH key heads of qkv (B,T,(NH+2KVH)HS),
// row t at position pos0 + t; cos and sin rounded to float (backend.h) in
// both instantiations, so the double kernels rotate by the float kernels' angles.
template <typename R>
void rope_forward(R* qkv, int B, int T, int NH, int KVH, int HS, int pos0, float theta);
template <typename R>
void rope_backward(R* dqkv, int B, int T, int NH, int KVH, int HS, int pos0, float theta);

template <typename R>
void gelu_forward(R* out, const R* inp, int64_t n);
template <typename R>
void gelu_backward(R* dinp, const R* dout, const R* inp, int64_t n);

template <typename R>
void relu_forward(R* out, const R* inp, int64_t n);
template <typename R>
void relu_backward(R* dinp, const R* dout, const R* inp, int64_t n);
template <typename R>
void silu_forward(R* out, const R* inp, int64_t n);
template <typename R>
void silu_backward(R* dinp, const R* dout, const R* inp, int64_t n);

// inp (N,2H): gate then up per row; out (N,H), dinp (N,2H).
template <typename R>
void swiglu_forward(R* out, const R* inp, int N, int H);
template <typename R>
void swiglu_backward(R* dinp, const R* dout, const R* inp, int N, int H);

template <typename R>
void residual_forward(R* out, const R* a, const R* b, int64_t n);

template <typename R>
void crossentropy_forward(R* losses, const R* logits, const int32_t* targets, int N, int V);
template <typename R>
void crossentropy_backward(R* dlogits, const R* logits, const int32_t* targets, R dloss, int N, int V);

// The vocabulary-parallel cross-entropy (kernels/backend.h): logits (N,W)
// hold the columns [v0, v0 + W) of the (N, vocab) logits; parts (P+1, N).
template <typename R>
void crossentropy_shard_stats(R* lse, R* target_logit, const R* logits, const int32_t* targets, int N, int W,
                              int64_t v0, int64_t vocab);
template <typename R>
void crossentropy_shard_combine(R* losses, R* lse, const R* parts, int P, int N);
template <typename R>
void crossentropy_shard_backward(R* dlogits, const R* logits, const R* lse, const int32_t* targets, R dloss, int N,
                                 int W, int64_t v0, int64_t vocab);

template <typename R>
void adam_update(R* param, const R* grad, R* m, R* v, int64_t n, R beta1, R beta2, R eps, R step_size,
                 R v_scale, R decay_factor, R grad_scale);

template <typename R>
double sum_squares(const R* x, int64_t n);

}  // namespace gpt2::ref
