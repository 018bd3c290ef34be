// Per-element and per-row arithmetic of the CUDA kernels (kernels.cu), as
// inline functions that compile both for the device (nvcc) and for the host
// (g++), so tests/device_math_test.cpp can rebuild each kernel on the host
// with the same formulas, the same operation order and the same launch
// constants, and hold it to the reference kernels. Not a kernel library:
// no CUDA headers, no memory access patterns, no threads.
//
// Summation order matters for determinism and for the host emulation, so it
// is part of the contract written here:
//   * a warp reduction is the xor butterfly with offsets 16, 8, 4, 2, 1
//     (warp_butterfly below emulates it on 32 host values); every lane ends
//     with the same value because IEEE addition and fmaxf are commutative;
//   * a lane's partial over a row takes the elements lane, lane+32, ... in
//     ascending order;
//   * dot products of attention rows go through Dot4 (four running sums,
//     one per float4 component, combined (x+y)+(z+w)).
// The device may fuse a*b+c into one FMA (nvcc's default), the host does
// not, so host and device agree to rounding, not bitwise; adam_element avoids
// fusion on purpose (see there).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/backend.h"  // AdamCoefficients

#if defined(__CUDACC__)
#define GPT2_HD __host__ __device__
#else
#define GPT2_HD
#endif

namespace gpt2::cuda::dm {

constexpr int kWarpSize = 32;

// Launch constants the host emulation must share with kernels.cu.
constexpr int kRowWarps = 8;              // rows (one per warp) per block: layernorm, crossentropy
constexpr int kAttnWarps = 8;             // query/key rows (one per warp) per attention block
constexpr int kColumnTileRows = 8;        // threadIdx.y extent of the column-sum tiles
constexpr int kColumnChunkRows = 256;     // rows summed by one column-sum block before the final pass
constexpr int kReduceThreads = 256;       // threads per reduce_sum block (both stages)
constexpr int kReduceBlocks = 256;        // stage-1 blocks = partials the stage-2 block combines

// Number of partial column sums per column (row chunks) for N rows.
constexpr int column_chunks(int N) { return (N + kColumnChunkRows - 1) / kColumnChunkRows; }

struct SumOp {
  GPT2_HD float operator()(float a, float b) const { return a + b; }
  GPT2_HD double operator()(double a, double b) const { return a + b; }
};
struct MaxOp {
  GPT2_HD float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Host emulation of the device's xor-butterfly warp reduction: after each
// round lane l holds op(lane[l], lane[l ^ offset]), exactly what
// v = op(v, __shfl_xor_sync(mask, v, offset)) computes on the device.
template <typename T, typename Op>
inline T warp_butterfly(T (&lane)[kWarpSize], Op op) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    T next[kWarpSize];
    for (int l = 0; l < kWarpSize; ++l) next[l] = op(lane[l], lane[l ^ offset]);
    for (int l = 0; l < kWarpSize; ++l) lane[l] = next[l];
  }
  return lane[0];
}

// Dot product of two rows read as float4: four independent running sums
// (instruction-level parallelism on the device), combined at the end.
struct Dot4 {
  float x = 0.0f, y = 0.0f, z = 0.0f, w = 0.0f;
  GPT2_HD void add(float ax, float ay, float az, float aw, float bx, float by, float bz, float bw) {
    x += ax * bx;
    y += ay * by;
    z += az * bz;
    w += aw * bw;
  }
  GPT2_HD float total() const { return (x + y) + (z + w); }
};

// ---- GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) ----
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

GPT2_HD inline float gelu_forward(float x) {
  float u = kGeluScale * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

// d gelu / dx = 0.5 (1 + th) + 0.5 x (1 - th^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
GPT2_HD inline float gelu_grad(float x) {
  float th = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
  float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
}

// ---- LayerNorm (two-pass mean and biased variance, as the reference) ----
constexpr float kLayerNormEps = 1e-5f;

GPT2_HD inline float layernorm_rstd(float sum_sq_dev, int C) {
  float var = sum_sq_dev / static_cast<float>(C);
  return 1.0f / sqrtf(var + kLayerNormEps);
}
GPT2_HD inline float layernorm_out(float x, float mean, float rstd, float weight, float bias) {
  return (x - mean) * rstd * weight + bias;
}
// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dout * weight.
GPT2_HD inline float layernorm_dinp(float g, float xhat, float rstd, float g_mean, float gx_mean) {
  return rstd * (g - g_mean - xhat * gx_mean);
}

// ---- RMSNorm: no mean, no bias; the same eps as LayerNorm ----
constexpr float kRmsNormEps = 1e-5f;

GPT2_HD inline float rmsnorm_rstd(float sum_sq, int C) {
  return 1.0f / sqrtf(sum_sq / static_cast<float>(C) + kRmsNormEps);
}
GPT2_HD inline float rmsnorm_out(float x, float rstd, float weight) { return x * rstd * weight; }
// dx = rstd g - x rstd^3 mean(g x), g = dout * weight, written as
// rstd (g - xhat mean(g xhat)) with xhat = x rstd (layernorm_dinp without
// the mean term).
GPT2_HD inline float rmsnorm_dinp(float g, float xhat, float rstd, float gx_mean) {
  return rstd * (g - xhat * gx_mean);
}

// ---- RoPE: the pair (x[2i], x[2i+1]) of a head turns by pos * theta^(-2i/HS) ----
// The angle, cos and sin in double (pow, multiply, cos, sin), rounded to
// float, as backend.h asks of every backend. On the device double pow, cos
// and sin are within 2 ulp of double rather than correctly rounded, so a
// value can differ from the host's only where the double result lies within
// a few ulp of a float rounding boundary.
struct CosSin {
  float c, s;
};
GPT2_HD inline CosSin rope_cos_sin(int pos, int i, int HS, float theta) {
  const double inv_freq = pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / static_cast<double>(HS));
  const double angle = static_cast<double>(pos) * inv_freq;
  return {static_cast<float>(cos(angle)), static_cast<float>(sin(angle))};
}
// Forward rotation of (x0, x1) by the angle; the backward is the rotation by
// minus the angle (the transpose), so it flips the sign of s.
GPT2_HD inline void rope_rotate(float& x0, float& x1, CosSin cs, bool inverse) {
  const float s = inverse ? -cs.s : cs.s;
  const float y0 = x0 * cs.c - x1 * s;
  const float y1 = x0 * s + x1 * cs.c;
  x0 = y0;
  x1 = y1;
}

// ---- ReLU, SiLU, SwiGLU ----
GPT2_HD inline float relu_forward(float x) { return x > 0.0f ? x : 0.0f; }
// dout where x > 0, else 0 (also at x = 0).
GPT2_HD inline float relu_backward(float d, float x) { return x > 0.0f ? d : 0.0f; }

GPT2_HD inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
GPT2_HD inline float silu_forward(float x) { return x * sigmoid(x); }
// d silu / dx = s (1 + x (1 - s)), s = sigmoid(x).
GPT2_HD inline float silu_grad(float x) {
  const float s = sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}
GPT2_HD inline float silu_backward(float d, float x) { return d * silu_grad(x); }

// out = silu(g) u; dg = dout u silu'(g), du = dout silu(g).
GPT2_HD inline float swiglu_forward(float g, float u) { return silu_forward(g) * u; }
GPT2_HD inline float swiglu_dgate(float d, float g, float u) { return d * u * silu_grad(g); }
GPT2_HD inline float swiglu_dup(float d, float g) { return d * silu_forward(g); }

// ---- Cross-entropy from the row's max and sum of exp(z - max) ----
GPT2_HD inline float crossentropy_loss(float z_target, float maxv, float sumexp) {
  return maxv + logf(sumexp) - z_target;
}
GPT2_HD inline float crossentropy_grad(float z, float maxv, float sumexp, bool is_target, float dloss) {
  float p = expf(z - maxv) / sumexp;
  return dloss * (p - (is_target ? 1.0f : 0.0f));
}

// ---- The vocabulary-parallel cross-entropy (backend.h) ----
// Columns of a shard of W starting at global column v0 that are real
// vocabulary entries (the rest is padding).
GPT2_HD inline int shard_real_columns(int W, int64_t v0, int64_t vocab) {
  const int64_t r = vocab - v0;
  return static_cast<int>(r < 0 ? 0 : r > W ? W : r);
}
// A shard's log-sum-exp from its max and sum of exp(z - max); -inf for a shard of padding only.
GPT2_HD inline float shard_lse(int real, float maxv, float sumexp) { return real > 0 ? maxv + logf(sumexp) : -INFINITY; }
// The P shards' log-sum-exps of one row (parts[r * stride]), in rank order from their max.
GPT2_HD inline float combine_lse(const float* parts, int P, int64_t stride) {
  float m = parts[0];
  for (int r = 1; r < P; ++r) m = fmaxf(m, parts[r * stride]);
  float s = 0.0f;
  for (int r = 0; r < P; ++r) s += expf(parts[r * stride] - m);
  return m + logf(s);
}
// dloss (exp(z - lse) - onehot) on a real column, 0 on padding.
GPT2_HD inline float crossentropy_shard_grad(float z, float lse, bool real, bool is_target, float dloss) {
  return real ? dloss * (expf(z - lse) - (is_target ? 1.0f : 0.0f)) : 0.0f;
}

// ---- Attention: online softmax over chunks of 32 keys ----
// Running state (m, l): max and sum of exp(score - m). Merging a chunk with
// max cm and exp-sum cl taken against m_new = max(m, cm):
//   l' = l * exp(m - m_new) + cl.  The first chunk has m = -inf, scale 0.
GPT2_HD inline float softmax_rescale(float m_old, float m_new) { return expf(m_old - m_new); }
GPT2_HD inline float softmax_lse(float m, float l) { return m + logf(l); }
// dS_ij * scale with dS = P (dP - D), D_i = dO_i . O_i (= sum_j P_ij dP_ij).
GPT2_HD inline float attention_dscore(float p, float dp, float D, float scale) { return p * (dp - D) * scale; }

// ---- Adam / AdamW, in the reference's operation order ----
// Products and sums are rounded one by one (no FMA) so that the device
// update is bitwise the reference's: optimizer state drifts otherwise.
GPT2_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
GPT2_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
GPT2_HD inline float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// The bits of x rounded to bf16, nearest even, NaN kept quiet: the host's
// to_bf16 (kernels/bf16.h) in integer arithmetic, so that the device's
// conversion of a product's operands (train.precision bf16) is the CPU
// backend's bit for bit. Branch-free.
GPT2_HD inline uint16_t bf16_bits(float x) {
  uint32_t u = 0;
#if defined(__CUDA_ARCH__)
  u = __float_as_uint(x);
#else
  static_assert(sizeof(float) == sizeof(uint32_t));
  __builtin_memcpy(&u, &x, sizeof u);
#endif
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g g;
// p = p * decay - step * m / (sqrt(v) * v_scale + eps).
GPT2_HD inline void adam_element(float& param, float& m, float& v, float grad, const AdamCoefficients& k) {
  float g = mul_rn(grad, k.grad_scale);
  m = add_rn(mul_rn(k.beta1, m), mul_rn(sub_rn(1.0f, k.beta1), g));
  v = add_rn(mul_rn(k.beta2, v), mul_rn(mul_rn(sub_rn(1.0f, k.beta2), g), g));
  float denom = add_rn(mul_rn(sqrtf(v), k.v_scale), k.eps);
  param = sub_rn(mul_rn(param, k.decay_factor), mul_rn(k.step_size, m) / denom);
}

}  // namespace gpt2::cuda::dm
