// The rows of the tolerance table (tolerances.h), each with its derivation.
// The sizes of the terms quoted below are those of the op table's inputs
// (op_cases.cpp): U(-1,1) unless a row says otherwise. u = 2^-24.
#include "kernels/ops/tolerances.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace gpt2::ops {

namespace {

constexpr double kU = kUnitRoundoff;

Tolerance abs_rel(double atol, double rtol) { return Tolerance{atol, rtol, {}}; }

const std::vector<double>& need_terms(const ToleranceFacts& f, const char* row) {
  if (f.terms.empty()) throw std::logic_error(fmt::format("tolerance {}: the case supplied no |A||B| terms", row));
  return f.terms;
}

// The classical bound of a K-term product computed in two orders, per
// element: each side is within K u (|A||B|)_ij of the exact value, hence
// 2 (K+1) u (|A||B|)_ij between them (the +1 for the add onto a bias or a
// starting value), plus `addend_ulps` u times that addend's size.
Tolerance gemm(const ToleranceFacts& f, const char* row, double K, double addend_ulps) {
  const std::vector<double>& terms = need_terms(f, row);
  Tolerance t;
  t.bound.resize(terms.size());
  for (size_t i = 0; i < terms.size(); ++i) {
    t.bound[i] = 2.0 * (K + 1) * kU * terms[i] + (f.addend.empty() ? 0.0 : addend_ulps * kU * f.addend[i]);
  }
  return t;
}

// Attention's scores: HS-term dots of inputs U(-2,2) (terms <= 4).
double score_tol(const OpShape& s) { return 4.0 * static_cast<double>(s.HS()) * kU * 4; }

// Attention's output rows: convex combinations of |v| <= 2 over up to T
// keys, with fast_exp's 2 ulp on every weight, plus the scores' error.
Tolerance attention_out(const ToleranceFacts& f) {
  return abs_rel(4.0 * static_cast<double>(f.shape.T) * kU * 2 + 2 * score_tol(f.shape), 1e-5);
}

// dqkv sums up to T terms, each a product of HS-term dots (size <= 8) and
// inputs <= 2: the error scales like T HS u 16. A key/value head's gradient
// sums those of its NH/KVH query heads: G T terms (G = 1 for multi-head).
Tolerance attention_grad(const ToleranceFacts& f) {
  const double G = static_cast<double>(f.shape.NH) / static_cast<double>(f.shape.kv_heads());
  return abs_rel(4.0 * G * static_cast<double>(f.shape.T) * static_cast<double>(f.shape.HS()) * kU * 16, 1e-4);
}

struct Row {
  const char* op;
  const char* output;
  Dtype dtype;
  Tolerance (*derive)(const ToleranceFacts& f);
};

const Row kRows[] = {
    // One add per element, in the same order on every backend: identical.
    {"encoder_forward", "out", Dtype::f32, [](const ToleranceFacts&) { return Tolerance{}; }},
    // Each element sums its rows in the same order on every backend (the CUDA
    // one too: a sorted pass, no atomics): identical.
    {"encoder_backward", "dwte", Dtype::f32, [](const ToleranceFacts&) { return Tolerance{}; }},
    {"encoder_backward", "dwpe", Dtype::f32, [](const ToleranceFacts&) { return Tolerance{}; }},

    // Inputs U(-2,3): the mean and the variance sum C terms of size <= 3
    // (resp. 9), so each is within t = 4 C u 9; rstd inherits t relative as
    // well, and out = (x - mean) rstd w + b (|x - mean| <= 5) four times t.
    {"layernorm_forward", "mean", Dtype::f32,
     [](const ToleranceFacts& f) { return abs_rel(4.0 * static_cast<double>(f.shape.C) * kU * 9, 0); }},
    {"layernorm_forward", "rstd", Dtype::f32,
     [](const ToleranceFacts& f) {
       const double t = 4.0 * static_cast<double>(f.shape.C) * kU * 9;
       return abs_rel(t, t);
     }},
    {"layernorm_forward", "out", Dtype::f32,
     [](const ToleranceFacts& f) {
       const double t = 4.0 * static_cast<double>(f.shape.C) * kU * 9;
       return abs_rel(4 * t, t);
     }},
    // dinp (accumulated onto a U(-1,1) start): two C-term row means of terms
    // <= ~8; rtol 1e-5 for the rstd factor applied to them.
    {"layernorm_backward", "dinp", Dtype::f32,
     [](const ToleranceFacts& f) { return abs_rel(4.0 * static_cast<double>(f.shape.C) * kU * 8, 1e-5); }},
    // dweight, dbias: column sums over N rows of terms <= ~2 (resp. 1).
    {"layernorm_backward", "dweight", Dtype::f32,
     [](const ToleranceFacts& f) { return abs_rel(4.0 * static_cast<double>(f.shape.N()) * kU * 2, 0); }},
    {"layernorm_backward", "dbias", Dtype::f32,
     [](const ToleranceFacts& f) { return abs_rel(4.0 * static_cast<double>(f.shape.N()) * kU, 0); }},

    // Inputs U(-2,3), as layernorm's: the mean of squares sums C terms <= 9,
    // within t = 4 C u 9; rstd inherits t relative (half of it, the mean
    // square being ~2.3, plus the sqrt and the division), and
    // out = x rstd w (|x| <= 3) three times that, 4 t with a margin; rtol t
    // for the products.
    {"rmsnorm_forward", "rstd", Dtype::f32,
     [](const ToleranceFacts& f) {
       const double t = 4.0 * static_cast<double>(f.shape.C) * kU * 9;
       return abs_rel(t, t);
     }},
    {"rmsnorm_forward", "out", Dtype::f32,
     [](const ToleranceFacts& f) {
       const double t = 4.0 * static_cast<double>(f.shape.C) * kU * 9;
       return abs_rel(4 * t, t);
     }},
    // dinp (accumulated onto a U(-1,1) start): one C-term row mean of g xhat
    // (|g| <= 1, |xhat| = |x| rstd <= ~2), times xhat rstd <= ~1.5: 4 C u 4;
    // rtol 1e-5 for the rstd factor, as layernorm's.
    {"rmsnorm_backward", "dinp", Dtype::f32,
     [](const ToleranceFacts& f) { return abs_rel(4.0 * static_cast<double>(f.shape.C) * kU * 4, 1e-5); }},
    // dweight: column sums over N rows of xhat dout, terms <= ~2.
    {"rmsnorm_backward", "dweight", Dtype::f32,
     [](const ToleranceFacts& f) { return abs_rel(4.0 * static_cast<double>(f.shape.N()) * kU * 2, 0); }},

    // out (N,OC) = inp (N,C) W^T (+ bias): K = C, the bias added once (2 u |bias|).
    {"matmul_forward", "out", Dtype::f32,
     [](const ToleranceFacts& f) { return gemm(f, "matmul_forward/out", static_cast<double>(f.shape.C), 2); }},
    // dinp (N,C) = dout (N,OC) W: K = OC.
    {"matmul_backward", "dinp", Dtype::f32,
     [](const ToleranceFacts& f) { return gemm(f, "matmul_backward/dinp", static_cast<double>(f.shape.OC), 0); }},
    // dweight (OC,C) += dout^T x: K = N, plus 4 u of the += starting value.
    {"matmul_backward", "dweight", Dtype::f32,
     [](const ToleranceFacts& f) { return gemm(f, "matmul_backward/dweight", static_cast<double>(f.shape.N()), 4); }},
    // dbias (OC) += column sums of N terms <= 1, plus 4 u relative for the +=.
    {"matmul_backward", "dbias", Dtype::f32,
     [](const ToleranceFacts& f) { return abs_rel(4.0 * static_cast<double>(f.shape.N()) * kU, 4 * kU); }},

    // lse = max + log(sum of exp): the scores' error twice; rtol 1e-6 for
    // fast_exp's and the log's few ulp.
    {"attention_forward", "lse", Dtype::f32,
     [](const ToleranceFacts& f) { return abs_rel(2 * score_tol(f.shape), 1e-6); }},
    {"attention_forward", "out", Dtype::f32, attention_out},
    // The last row of attention_forward: the same arithmetic over T keys.
    {"attention_decode", "out", Dtype::f32, attention_out},
    // attention_grad, above.
    {"attention_backward", "dqkv", Dtype::f32, attention_grad},
    // The ring attention's blocks (backend.h attention_block_*), at T keys a
    // block. ".first" writes a causal block: attention_forward's rows. The
    // merge adds a convex combination of two such rows by weights within
    // fast_exp's and the exp's few ulp of each other's: twice the rows'
    // bounds, and rtol 1e-5 for the weights (2e-6 for the lse's log).
    {"attention_block_forward", "lse", Dtype::f32,
     [](const ToleranceFacts& f) { return abs_rel(4 * score_tol(f.shape), 2e-6); }},
    {"attention_block_forward", "out", Dtype::f32,
     [](const ToleranceFacts& f) {
       const Tolerance row = attention_out(f);
       return abs_rel(2 * row.atol, row.rtol);
     }},
    // attention_backward's terms over the T keys of a block (each P and dS
    // from the given lse, as there), onto a U(-1,1) start.
    {"attention_block_backward", "dqkv", Dtype::f32, attention_grad},
    {"attention_block_backward", "dkv", Dtype::f32, attention_grad},
    // Inputs U(-1,1); every backend turns a pair by the same float (cos, sin)
    // (backend.h). Each side rounds two products and a sum, within
    // 2 u (|x0 c| + |x1 s|) <= 2 sqrt(2) u: 6 u between them, 8 u with FMA
    // contraction's reordering.
    {"rope_forward", "qkv", Dtype::f32, [](const ToleranceFacts&) { return abs_rel(8 * kU, 0); }},
    {"rope_backward", "dqkv", Dtype::f32, [](const ToleranceFacts&) { return abs_rel(8 * kU, 0); }},

    // Inputs U(-6,6): fast_tanh's 3e-7 absolute error, times 0.5|x| <= 3.
    {"gelu_forward", "out", Dtype::f32, [](const ToleranceFacts&) { return abs_rel(1e-6, 4 * kU); }},
    // The derivative's two terms carry that error times |x| sech^2 and |dout| <= 1.
    {"gelu_backward", "dinp", Dtype::f32, [](const ToleranceFacts&) { return abs_rel(4e-6, 8 * kU); }},

    // A compare and a select per element, no rounding: identical.
    {"relu_forward", "out", Dtype::f32, [](const ToleranceFacts&) { return Tolerance{}; }},
    {"relu_backward", "dinp", Dtype::f32, [](const ToleranceFacts&) { return Tolerance{}; }},
    // Inputs U(-6,6). s = 1/(1+e), e = exp(-x) within fast_exp's 2 ulp: 1+e
    // within 2 u relative, the add and the division 1 ulp each, so s within
    // 4 u; x s one more: 5 u each side, 10 u between; rtol 12 u.
    {"silu_forward", "out", Dtype::f32, [](const ToleranceFacts&) { return abs_rel(0, 12 * kU); }},
    // dout s (1 + x (1 - s)): 1 - s loses s's 4 u relatively but keeps it
    // absolutely, times |x| <= 6, plus the factor's own 4 u: 28 u each side,
    // 56 u between (64 u), times |dout| <= 1; rtol 8 u for the products.
    {"silu_backward", "dinp", Dtype::f32, [](const ToleranceFacts&) { return abs_rel(64 * kU, 8 * kU); }},
    // Gates U(-6,6), up U(-1,1): silu(g) u is silu_forward's 10 u plus one
    // product on each side: 12 u; rtol 16 u.
    {"swiglu_forward", "out", Dtype::f32, [](const ToleranceFacts&) { return abs_rel(0, 16 * kU); }},
    // The gate half is silu_backward's dinp times |u| <= 1 (64 u absolute),
    // the up half dout silu(g): silu_forward's 10 u plus a product (12 u).
    {"swiglu_backward", "dinp", Dtype::f32, [](const ToleranceFacts&) { return abs_rel(64 * kU, 12 * kU); }},

    // One add per element: identical.
    {"residual_forward", "out", Dtype::f32, [](const ToleranceFacts&) { return Tolerance{}; }},

    // Logits U(-5,5): the log of a V-term sum of terms <= 10 (after the max
    // shift, each exp within fast_exp's 2 ulp).
    {"crossentropy_forward", "losses", Dtype::f32,
     [](const ToleranceFacts& f) { return abs_rel(4.0 * static_cast<double>(f.shape.V) * kU * 10, 0); }},
    // dloss (p - onehot), dloss = 1/N: p's V-term normaliser, scaled by dloss.
    {"crossentropy_backward", "dlogits", Dtype::f32,
     [](const ToleranceFacts& f) {
       const double dloss = 1.0 / static_cast<double>(f.shape.N());
       return abs_rel(dloss * 4.0 * static_cast<double>(f.shape.V) * kU, 8 * kU);
     }},

    // One shard's log-sum-exp: crossentropy_forward's without the pick; the
    // target's logit is copied.
    {"crossentropy_shard_stats", "lse", Dtype::f32,
     [](const ToleranceFacts& f) { return abs_rel(4.0 * static_cast<double>(f.shape.V) * kU * 10, 0); }},
    {"crossentropy_shard_stats", "target_logit", Dtype::f32, [](const ToleranceFacts&) { return Tolerance{}; }},
    // Three shards' values U(-5,5): the log of a 3-term sum of terms <= 1
    // (each exp within 2 ulp) plus the max (|m| <= 5: 8 u of rounding), then
    // the target's logit (|z| <= 5) subtracted: 8 u more.
    {"crossentropy_shard_combine", "lse", Dtype::f32,
     [](const ToleranceFacts&) { return abs_rel(4.0 * 3 * kU * 10 + 8 * kU, 0); }},
    {"crossentropy_shard_combine", "losses", Dtype::f32,
     [](const ToleranceFacts&) { return abs_rel(4.0 * 3 * kU * 10 + 16 * kU, 0); }},
    // dloss (exp(z - lse) - onehot): one subtraction (|z - lse| <= 15: 16 u of
    // its rounding, times the exp's slope p <= 1) and the exp's 2 ulp, scaled
    // by dloss = 1/N; the onehot subtraction adds dloss u.
    {"crossentropy_shard_backward", "dlogits", Dtype::f32,
     [](const ToleranceFacts& f) {
       const double dloss = 1.0 / static_cast<double>(f.shape.N());
       return abs_rel(dloss * 20 * kU, 8 * kU);
     }},

    // The same few operations per element on every backend, up to FMA
    // contraction: within 2 ulp; the parameter's step (step_size 1e-3 times
    // m / (sqrt(v) v_scale + eps), of size <= ~8) also within 8 u absolute.
    {"adam_update", "m", Dtype::f32, [](const ToleranceFacts&) { return abs_rel(0, 2 * kU); }},
    {"adam_update", "v", Dtype::f32, [](const ToleranceFacts&) { return abs_rel(0, 2 * kU); }},
    {"adam_update", "param", Dtype::f32, [](const ToleranceFacts&) { return abs_rel(1e-3 * 8 * kU, 2 * kU); }},

    // Both accumulate P exact squares (<= 1) in double (unit roundoff
    // u_d = 2^-53), in different orders (threads' and lanes' partials). The
    // worst case is (P-1) u_d sum(x^2) on each side; rounding errors of random
    // sign grow like sqrt(P) u_d sum(x^2) instead (Higham, Accuracy and
    // Stability of Numerical Algorithms, 2nd ed., section 4.2). Measured: 4
    // sqrt(P) u_d sum(x^2) between the CPU backend and the reference at the
    // larger benchmark shape (P = 9.8e7). rtol is the smaller of the two
    // sides' worst case, 2 (P-1) u_d, and 64 sqrt(P) u_d (16 times the
    // measurement); sum(x^2) = |expected|, the terms being non-negative.
    {"sum_squares", "sum", Dtype::f32,
     [](const ToleranceFacts& f) {
       const double P = static_cast<double>(f.shape.P), ud = 0x1.0p-53;
       return abs_rel(0, std::min(2 * (P - 1), 64 * std::sqrt(P)) * ud);
     }},
    // The contract's sum adds in element order, in double, on the host
    // backends (sum_in_order): identical. A device sums in a tree and gets
    // device_tolerance.
    {"sum", "sum", Dtype::f32, [](const ToleranceFacts&) { return Tolerance{}; }},
};

// The bf16 rows (Dtype::bf16): the cases whose stored operand is bf16, as
// train.precision bf16 keeps it (model/activations.h). Each is its f32 row
// plus what bf16 adds, derived here; ub = 2^-8, bf16's unit roundoff.
constexpr double kUb = 1.0 / 256;

// An output stored in bf16: both sides round their f32 result a and b once,
// |rnd(a) - rnd(b)| <= |a - b| + ub |a| + ub |b|; with |a|, |b| <= |rnd(b)|
// (1 + 2 ub) to first order, the f32 tolerance grows by 2 ub relative and
// everything by (1 + 2 ub).
Tolerance rounded_once(Tolerance t) {
  const double g = 1 + 2 * kUb;
  t.atol *= g;
  for (double& b : t.bound) b *= g;
  t.rtol = (t.rtol + 2 * kUb) * g;
  return t;
}

// A product with bf16 operands (the bf16 CPU backend: oneDNN, fp32 sums):
// against the reference, which multiplies the same bf16 input by the f32
// operands, at most two operands were rounded (the weight, and the output
// gradient in the backward), each product within (2 ub + ub^2) |a||b|; the
// f32 accumulation bound stays.
Tolerance bf16_products(Tolerance t, const ToleranceFacts& f, const char* row) {
  const std::vector<double>& terms = need_terms(f, row);
  for (size_t i = 0; i < terms.size(); ++i) t.bound[i] += (2 * kUb + kUb * kUb) * terms[i];
  return t;
}

// The bf16 attention (its products take bf16 operands): the f32 row plus the
// bound the case derives element by element from its inputs
// (attention_bf16_bounds in op_cases.cpp, where the derivation is), then, for
// a stored output, its rounding.
Tolerance case_bound(Tolerance t, const ToleranceFacts& f, const char* row, bool stored) {
  if (f.extra.empty()) throw std::logic_error(fmt::format("tolerance {}: the case supplied no bf16 bound", row));
  t.bound.resize(f.extra.size(), 0.0);
  for (size_t i = 0; i < f.extra.size(); ++i) t.bound[i] += f.extra[i];
  return stored ? rounded_once(t) : t;
}

struct Bf16Row {
  const char* op;
  const char* output;
  enum Rule { kSame, kRoundedOnce, kProducts, kCaseBound, kCaseBoundStored } rule;
};

// Every output of the bf16 cases (op_table(Dtype::bf16)) and its rule.
// The attention's rows add the case's own bound to the f32 row (case_bound):
// its five products take bf16 operands on the bf16 CPU backend.
constexpr Bf16Row kBf16Rows[] = {
    {"layernorm_forward", "mean", Bf16Row::kSame},        {"layernorm_forward", "rstd", Bf16Row::kSame},
    {"layernorm_forward", "out", Bf16Row::kRoundedOnce},  {"rmsnorm_forward", "rstd", Bf16Row::kSame},
    {"rmsnorm_forward", "out", Bf16Row::kRoundedOnce},    {"matmul_forward", "out", Bf16Row::kProducts},
    {"matmul_backward", "dinp", Bf16Row::kProducts},      {"matmul_backward", "dweight", Bf16Row::kProducts},
    {"matmul_backward", "dbias", Bf16Row::kSame},         {"attention_forward", "lse", Bf16Row::kCaseBound},
    {"attention_forward", "out", Bf16Row::kCaseBoundStored},
    {"attention_backward", "dqkv", Bf16Row::kCaseBound},
    {"attention_block_forward", "lse", Bf16Row::kCaseBound},
    {"attention_block_forward", "out", Bf16Row::kCaseBound},  // the ring merges into a float output
    {"attention_block_backward", "dqkv", Bf16Row::kCaseBound},
    {"attention_block_backward", "dkv", Bf16Row::kCaseBound},
    {"gelu_forward", "out", Bf16Row::kRoundedOnce},       {"relu_forward", "out", Bf16Row::kRoundedOnce},
    {"silu_forward", "out", Bf16Row::kRoundedOnce},       {"swiglu_forward", "out", Bf16Row::kRoundedOnce},
};

}  // namespace


double Tolerance::at(size_t i, double expected) const {
  return atol + (bound.empty() ? 0.0 : bound[i]) + rtol * std::fabs(expected);
}

Tolerance tolerance(const std::string& op, const std::string& output, Dtype dtype, const ToleranceFacts& facts) {
  if (dtype == Dtype::bf16) {
    for (const Bf16Row& r : kBf16Rows) {
      if (op != r.op || output != r.output) continue;
      const Tolerance t = tolerance(op, output, Dtype::f32, facts);
      const std::string row = op + "/" + output + " bf16";
      switch (r.rule) {
        case Bf16Row::kRoundedOnce: return rounded_once(t);
        case Bf16Row::kProducts: return bf16_products(t, facts, row.c_str());
        case Bf16Row::kCaseBound: return case_bound(t, facts, row.c_str(), false);
        case Bf16Row::kCaseBoundStored: return case_bound(t, facts, row.c_str(), true);
        case Bf16Row::kSame: return t;
      }
    }
  }
  for (const Row& r : kRows) {
    if (op == r.op && output == r.output && dtype == r.dtype) return r.derive(facts);
  }
  throw std::invalid_argument(
      fmt::format("no tolerance for op '{}', output '{}', dtype {} (core/kernels/ops/tolerances.cpp)", op, output,
                  to_string(dtype)));
}

std::vector<std::string> tolerance_keys(Dtype dtype) {
  std::vector<std::string> keys;
  if (dtype == Dtype::bf16) {
    for (const Bf16Row& r : kBf16Rows) keys.push_back(std::string(r.op) + "/" + r.output);
    return keys;
  }
  for (const Row& r : kRows) {
    if (r.dtype == dtype) keys.push_back(std::string(r.op) + "/" + r.output);
  }
  return keys;
}

Tolerance device_tolerance(Tolerance t, double max_abs_expected) {
  t.atol += 4 * kU * max_abs_expected;
  t.rtol += 4 * kU;
  return t;
}

}  // namespace gpt2::ops
