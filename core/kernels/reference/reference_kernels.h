// Naive reference kernels: the algorithmic definition of every op, written as
// plain loops that follow the formulas. Templated on the scalar so the tests
// can run them in double (finite differences) as well as float (the oracle
// for the optimised backends). No threads, no tricks; never fast.
// Sizes: B batch, T time, C channels, NH heads, V vocab, N rows, OC out channels.
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
void matmul_forward(R* out, const R* inp, const R* weight, const R* bias, int N, int C, int OC);
template <typename R>
void matmul_backward(R* dinp, R* dweight, R* dbias, const R* dout, const R* inp, const R* weight,
                     int N, int C, int OC);

// Builds each (T,T) score row in full; ignores the forward's out and lse in
// backward and recomputes the probabilities from q and k.
template <typename R>
void attention_forward(R* out, R* lse, const R* qkv, int B, int T, int C, int NH);
template <typename R>
void attention_backward(R* dqkv, const R* dout, const R* qkv, int B, int T, int C, int NH);

// Only the last query row t = P-1 of (1,P,3C): out (C).
template <typename R>
void attention_decode(R* out, const R* qkv, int P, int C, int NH);

template <typename R>
void gelu_forward(R* out, const R* inp, int64_t n);
template <typename R>
void gelu_backward(R* dinp, const R* dout, const R* inp, int64_t n);

template <typename R>
void residual_forward(R* out, const R* a, const R* b, int64_t n);

template <typename R>
void crossentropy_forward(R* losses, const R* logits, const int32_t* targets, int N, int V);
template <typename R>
void crossentropy_backward(R* dlogits, const R* logits, const int32_t* targets, R dloss, int N, int V);

template <typename R>
void adam_update(R* param, const R* grad, R* m, R* v, int64_t n, R beta1, R beta2, R eps, R step_size,
                 R v_scale, R decay_factor, R grad_scale);

template <typename R>
double sum_squares(const R* x, int64_t n);

}  // namespace gpt2::ref
