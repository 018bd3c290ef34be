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
  if (k == "attention_forward") {
    // Q K^T and P V over the visible pairs (flops.h); reads qkv, writes out and lse.
    const double flop = 2.0 * 2.0 * static_cast<double>(s.B) * C * causal_pairs(s);
    return {flop, kF * (3 * NC + NC + static_cast<double>(s.B) * s.NH * T)};
  }
  if (k == "attention_backward") {
    // dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q: twice the forward.
    const double flop = 2.0 * 2.0 * 2.0 * static_cast<double>(s.B) * C * causal_pairs(s);
    return {flop, kF * (3 * NC + NC + NC + static_cast<double>(s.B) * s.NH * T + 3 * NC)};
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
    // One query row against T keys: q.k and p v over T pairs per head; reads
    // the query and T keys and values, writes C.
    return {2.0 * 2.0 * C * T, kF * (C + 2 * T * C + C)};
  }
  throw std::invalid_argument(fmt::format("op_cost: unknown op '{}'", k));
}

OpCost allreduce_cost(const OpShape& s, int ranks) {
  // Per rank, a bandwidth-optimal (ring) sum-allreduce sends and receives
  // 2 (R-1)/R of the buffer and adds (R-1)/R of it.
  const double P = static_cast<double>(s.P);
  const double share = ranks > 1 ? static_cast<double>(ranks - 1) / ranks : 0.0;
  return {share * P, kF * 2 * share * P};
}

std::string OpShape::str() const {
  return fmt::format("B {} T {} C {} NH {} V {} OC {} P {}", B, T, C, NH, V, OC, P);
}

}  // namespace gpt2::ops
