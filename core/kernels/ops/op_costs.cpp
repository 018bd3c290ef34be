// The formulas of op_costs.h: one branch per op, its per-element operation
// counts written next to it.
#include "kernels/ops/op_costs.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace gpt2::ops {

namespace {

constexpr double kF = 4;  // bytes per float32 or int32

// Causal attention's visible (query, key) pairs per (batch row, head).
double causal_pairs(const OpShape& s) { return static_cast<double>(s.T) * (s.T + 1) / 2.0; }

}  // namespace

OpCost op_cost(const std::string& k, const OpShape& s) {
  const double N = static_cast<double>(s.B) * s.T, C = s.C, V = s.V, T = s.T, OC = s.OC, P = s.P;
  const double NC = N * C;
  const double W = static_cast<double>(s.qkv_width());  // attention: qkv's row, 3C for multi-head
  if (k == "encoder_forward") {
    // out = wte[tok] + wpe[t]: 1 add per element.
    return {NC, kF * (N + std::min(V, N) * C + T * C + NC)};
  }
  if (k == "encoder_backward") {
    // dwte[tok] += dout, dwpe[t] += dout: 2 adds per element; both gradients accumulated.
    return {2 * NC, kF * (N + NC + 2 * std::min(V, N) * C + 2 * T * C)};
  }
  if (k == "layernorm_forward") {
    // mean: 1 add; variance: sub, mul, add; out: sub, mul (rstd), mul (w), add (b). 8 per element.
    return {8 * NC, kF * (2 * NC + 2 * C + 2 * N)};
  }
  if (k == "layernorm_backward") {
    // xhat 2, dnorm = w*dout 1, dbias += 1, dweight += 2, the two row means 3,
    // dinp += rstd*(dnorm - m1 - xhat*m2) 5: 14 per element. dinp, dweight, dbias accumulate.
    return {14 * NC, kF * (2 * NC + 2 * NC + C + 4 * C + 2 * N)};
  }
  if (k == "matmul_forward") {
    // out = inp @ weight^T + bias.
    return {2 * N * C * OC + N * OC, kF * (NC + OC * C + OC + N * OC)};
  }
  if (k == "matmul_backward") {
    // dinp = dout @ weight (2 N C OC), dweight += dout^T @ inp (2 N C OC), dbias += column sums.
    return {4 * N * C * OC + N * OC, kF * (N * OC + NC + OC * C + NC + 2 * OC * C + 2 * OC)};
  }
  if (k == "rmsnorm_forward") {
    // mean of squares: mul, add; out: mul (rstd), mul (w). 4 per element.
    return {4 * NC, kF * (2 * NC + C + N)};
  }
  if (k == "rmsnorm_backward") {
    // xhat 1, g = w*dout 1, the row mean of g*xhat 2, dweight += 2,
    // dinp += rstd*(g - xhat*m) 4: 10 per element. dinp and dweight accumulate.
    return {10 * NC, kF * (2 * NC + 2 * NC + C + 2 * C + N)};
  }
  if (k == "attention_forward") {
    // Q K^T and P V over the visible pairs (flops.h), per query head whatever
    // KVH; reads qkv (N x (NH+2KVH)HS), writes out and lse.
    const double flop = 2.0 * 2.0 * static_cast<double>(s.B) * C * causal_pairs(s);
    return {flop, kF * (N * W + NC + static_cast<double>(s.B) * s.NH * T)};
  }
  if (k == "attention_backward") {
    // dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q: twice the forward.
    // Reads qkv, dout, out, lse; writes dqkv.
    const double flop = 2.0 * 2.0 * 2.0 * static_cast<double>(s.B) * C * causal_pairs(s);
    return {flop, kF * (N * W + NC + NC + static_cast<double>(s.B) * s.NH * T + N * W)};
  }
  if (k == "attention_block_forward") {
    // Q K^T and P V of one block of T keys, all visible (the table's
    // default: an earlier block; ".first", the causal one, does about half),
    // and the merge (5 per output element, not counted beside the products).
    // Reads qkv and the block (2 KVH HS a row), reads and writes out and lse.
    const double kv = 2.0 * static_cast<double>(s.kv_heads()) * static_cast<double>(s.HS());
    const double flop = 2.0 * 2.0 * static_cast<double>(s.B) * C * T * T;
    return {flop, kF * (N * W + N * kv + 2 * NC + 2 * static_cast<double>(s.B) * s.NH * T)};
  }
  if (k == "attention_block_backward") {
    // dO.v, dq, dk, dv: four products over the causal default's pairs (q.k
    // again besides, not counted, as attention_backward does not count its
    // own); ".earlier" sees all T x T pairs, about twice the count. Reads
    // qkv, the block, dout, out, lse; dqkv's query columns and dkv accumulate.
    const double kv = 2.0 * static_cast<double>(s.kv_heads()) * static_cast<double>(s.HS());
    const double flop = 2.0 * 2.0 * 2.0 * static_cast<double>(s.B) * C * causal_pairs(s);
    return {flop, kF * (N * W + N * kv + 2 * NC + static_cast<double>(s.B) * s.NH * T + 2 * NC + 2 * N * kv)};
  }
  if (k == "rope_forward" || k == "rope_backward") {
    // Per pair of the NH query and KVH key heads: 4 mul, 2 add (3 per
    // element), read and written in place; value heads untouched. The angles
    // (T x HS/2 of them, in double) are not counted.
    const double n = N * static_cast<double>(s.NH + s.kv_heads()) * static_cast<double>(s.HS());
    return {3 * n, kF * 2 * n};
  }
  if (k == "gelu_forward") {
    // x^3 2, c*(x + 0.044715 x^3) 3, tanh 1, 1 + 1, 0.5*x*() 2: 9 per element over (N, 4C).
    const double n = 4 * NC;
    return {9 * n, kF * 2 * n};
  }
  if (k == "gelu_backward") {
    // the forward's inner terms 6, tanh 1, sech^2 = 1 - th^2 2, the derivative's
    // two terms and their sum 8, times dout 1: 18 per element.
    const double n = 4 * NC;
    return {18 * n, kF * 3 * n};
  }
  if (k == "relu_forward") {
    // One compare-and-select per element over (N, 4C).
    const double n = 4 * NC;
    return {n, kF * 2 * n};
  }
  if (k == "relu_backward") {
    const double n = 4 * NC;
    return {n, kF * 3 * n};
  }
  if (k == "silu_forward") {
    // s = 1/(1 + exp(-x)): neg, exp, add, div 4; x*s 1: 5 per element over (N, 4C).
    const double n = 4 * NC;
    return {5 * n, kF * 2 * n};
  }
  if (k == "silu_backward") {
    // s 4, 1 - s 1, x*() 1, 1 + 1, s*() 1, dout* 1: 9 per element.
    const double n = 4 * NC;
    return {9 * n, kF * 3 * n};
  }
  if (k == "swiglu_forward") {
    // Per output element of (N, 4C): silu(g) 5, times u 1; reads g and u (N, 8C).
    const double n = 4 * NC;
    return {6 * n, kF * 3 * n};
  }
  if (k == "swiglu_backward") {
    // s 4, silu = g*s 1, du = dout*silu 1, silu' = s(1 + g(1 - s)) 4,
    // dg = dout*u*silu' 2: 12 per output element; reads dout, g, u, writes dg, du.
    const double n = 4 * NC;
    return {12 * n, kF * 5 * n};
  }
  if (k == "residual_forward") {
    return {NC, kF * 3 * NC};
  }
  if (k == "crossentropy_forward") {
    // max 1, sub and exp 2, sum 1 per logit (the log and the pick per row not counted).
    return {4 * N * V, kF * (N * V + 2 * N)};
  }
  if (k == "crossentropy_backward") {
    // max 1, sub and exp 2, sum 1, then (p - onehot) * dloss with p = e/sum: 3 per logit.
    return {7 * N * V, kF * (2 * N * V + N)};
  }
  if (k == "crossentropy_shard_stats") {
    // crossentropy_forward's per logit, on the shard's columns; two outputs per row.
    return {4 * N * V, kF * (N * V + 3 * N)};
  }
  if (k == "crossentropy_shard_combine") {
    // Per row, over 3 shards: max 1, sub and exp 2, sum 1 each; the log, the add and the subtraction.
    return {15 * N, kF * (4 * N + 2 * N)};
  }
  if (k == "crossentropy_shard_backward") {
    // sub, exp, the onehot, the scale: 4 per logit; reads the logits and lse, writes dlogits.
    return {4 * N * V, kF * (2 * N * V + 2 * N)};
  }
  if (k == "adam_update") {
    // g*scale 1; m 3; v 4; p*decay - step*m/(sqrt(v)*v_scale + eps): 7. 15 per element;
    // reads p, g, m, v and writes p, m, v.
    return {15 * P, kF * 7 * P};
  }
  if (k == "sum_squares") {
    return {2 * P, kF * P};
  }
  if (k == "sum") {
    // One add per element, in double.
    return {P, kF * P};
  }
  if (k == "attention_decode") {
    // One query row against T keys: q.k and p v over T pairs per query head;
    // reads the query (C) and T rows of the KVH key and value heads, writes C.
    const double kv = C * static_cast<double>(s.kv_heads()) / static_cast<double>(s.NH);
    return {2.0 * 2.0 * C * T, kF * (C + 2 * T * kv + C)};
  }
  throw std::invalid_argument(fmt::format("op_cost: unknown op '{}'", k));
}

OpCost op_cost(const std::string& k, const OpShape& s, Dtype dtype) {
  OpCost c = op_cost(k, s);
  if (dtype == Dtype::f32) return c;
  const double N = static_cast<double>(s.B) * s.T, C = s.C;
  double stored = 0;  // elements of the bf16 operand
  if (k == "attention_backward") {  // its bf16 form never reads out: D comes from the tile (backend.h)
    c.bytes -= 4 * N * C;
    return c;
  }
  if (k == "attention_block_forward" || k == "attention_block_backward") return c;  // every operand stays f32

  if (k == "layernorm_forward" || k == "rmsnorm_forward" || k == "attention_forward" || k == "matmul_forward" ||
      k == "matmul_backward") {
    stored = N * C;
  } else if (k == "gelu_forward" || k == "relu_forward" || k == "silu_forward" || k == "swiglu_forward") {
    stored = N * 4 * C;
  } else {
    throw std::invalid_argument(fmt::format("op_cost: '{}' has no bf16 row", k));
  }
  c.bytes -= 2 * stored;
  return c;
}

OpCost allreduce_cost(const OpShape& s, int ranks) {
  // Per rank, a bandwidth-optimal (ring) sum-allreduce sends and receives
  // 2 (R-1)/R of the buffer and adds (R-1)/R of it.
  const double P = static_cast<double>(s.P);
  const double share = ranks > 1 ? static_cast<double>(ranks - 1) / ranks : 0.0;
  return {share * P, kF * 2 * share * P};
}

std::string OpShape::str() const {
  const std::string s = fmt::format("B {} T {} C {} NH {} V {} OC {} P {}", B, T, C, NH, V, OC, P);
  return KVH > 0 ? s + fmt::format(" KVH {}", KVH) : s;
}

}  // namespace gpt2::ops
