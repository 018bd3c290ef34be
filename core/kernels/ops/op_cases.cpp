// The cases of the op table (op_table.h) other than the matrix products
// (matmul_cases.cpp), and the table itself. Each case draws its inputs from
// its own seeds (op_arrays.h), in the ranges the tolerance table's
// derivations assume (tolerances.cpp). Shapes use the letters of op_costs.h.
#include "kernels/ops/op_cases.h"

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/ops/op_arrays.h"

namespace gpt2::ops {

namespace {

// Token ids of a (B,T) batch; `masked`: every third one negative, as a
// vocabulary shard's lookup passes the tokens another rank holds.
std::vector<int32_t> encoder_tokens(const OpShape& s, bool masked) {
  std::vector<int32_t> tok = random_tokens(static_cast<size_t>(s.N()), s.V, 1);
  if (masked) {
    for (size_t i = 0; i < tok.size(); i += 3) tok[i] = -1;
  }
  return tok;
}

class EncoderForward final : public TableCase {
 public:
  EncoderForward(const OpShape& s, Memory& m, bool masked = false)
      : TableCase("encoder_forward", s, {"out"}),
        tok_(encoder_tokens(s, masked)),
        wte_(random_array({s.V, s.C}, 2, m)),
        wpe_(random_array({s.T, s.C}, 3, m)),
        out_(overwritten({s.B, s.T, s.C}, m)) {}
  void reset() override { out_.reset(); }
  void run(Backend& be) override { be.encoder_forward(out_.t(), tok_.data(), wte_.t(), wpe_.t()); }
  std::vector<OpOutput> outputs() override { return {out(0, out_.host())}; }

 private:
  std::vector<int32_t> tok_;  // (B,T), host
  Array wte_, wpe_;           // (V,C), (T,C)
  Output out_;                // (B,T,C)
};

class EncoderBackward final : public TableCase {
 public:
  EncoderBackward(const OpShape& s, Memory& m, bool masked = false)
      : TableCase("encoder_backward", s, {"dwte", "dwpe"}),
        tok_(encoder_tokens(s, masked)),
        dout_(random_array({s.B, s.T, s.C}, 4, m)),
        dwte_(accumulated({s.V, s.C}, 5, m)),
        dwpe_(accumulated({s.T, s.C}, 6, m)) {}
  void reset() override {
    dwte_.reset();
    dwpe_.reset();
  }
  void run(Backend& be) override { be.encoder_backward(dwte_.t(), dwpe_.t(), dout_.t(), tok_.data()); }
  std::vector<OpOutput> outputs() override { return {out(0, dwte_.host()), out(1, dwpe_.host())}; }

 private:
  std::vector<int32_t> tok_;  // (B,T), host
  Array dout_;                // (B,T,C)
  Output dwte_, dwpe_;        // (V,C), (T,C), +=
};

class LayernormForward final : public TableCase {
 public:
  LayernormForward(const OpShape& s, Memory& m, Dtype d = Dtype::f32)
      : TableCase("layernorm_forward", s, {"mean", "rstd", "out"}, d),
        x_(random_array({s.N(), s.C}, 11, m, -2.0f, 3.0f)),
        w_(random_array({s.C}, 12, m)),
        b_(random_array({s.C}, 13, m)),
        out_(overwritten({s.N(), s.C}, m, d)),
        mean_(overwritten({s.N()}, m)),
        rstd_(overwritten({s.N()}, m)) {}
  void reset() override {
    out_.reset();
    mean_.reset();
    rstd_.reset();
  }
  void run(Backend& be) override { be.layernorm_forward(out_.t(), mean_.t(), rstd_.t(), x_.t(), w_.t(), b_.t()); }
  std::vector<OpOutput> outputs() override { return {out(0, mean_.host()), out(1, rstd_.host()), out(2, out_.host())}; }

 private:
  Array x_, w_, b_;           // (N,C), (C), (C)
  Output out_, mean_, rstd_;  // (N,C), (N), (N)
};

class LayernormBackward final : public TableCase {
 public:
  LayernormBackward(const OpShape& s, Memory& m)
      : TableCase("layernorm_backward", s, {"dinp", "dweight", "dbias"}),
        x_(random_array({s.N(), s.C}, 11, m, -2.0f, 3.0f)),
        w_(random_array({s.C}, 12, m)),
        dout_(random_array({s.N(), s.C}, 14, m)),
        dx_(accumulated({s.N(), s.C}, 15, m)),
        dw_(accumulated({s.C}, 16, m)),
        db_(accumulated({s.C}, 17, m)) {
    // The forward's statistics, from the reference on host copies.
    Memory& h = host_memory();
    const Array x = array_of({s.N(), s.C}, x_.host(), h), w = array_of({s.C}, w_.host(), h);
    const Array b = random_array({s.C}, 13, h);
    Array out({s.N(), s.C}, h), mean({s.N()}, h), rstd({s.N()}, h);
    make_reference_backend()->layernorm_forward(out.t(), mean.t(), rstd.t(), x.t(), w.t(), b.t());
    mean_ = array_of({s.N()}, mean.host(), m);
    rstd_ = array_of({s.N()}, rstd.host(), m);
  }
  void reset() override {
    dx_.reset();
    dw_.reset();
    db_.reset();
  }
  void run(Backend& be) override {
    be.layernorm_backward(dx_.t(), dw_.t(), db_.t(), dout_.t(), x_.t(), w_.t(), mean_.t(), rstd_.t());
  }
  std::vector<OpOutput> outputs() override { return {out(0, dx_.host()), out(1, dw_.host()), out(2, db_.host())}; }

 private:
  Array x_, w_, dout_, mean_, rstd_;  // (N,C), (C), (N,C), (N), (N)
  Output dx_, dw_, db_;               // (N,C), (C), (C), all +=
};

class RmsnormForward final : public TableCase {
 public:
  RmsnormForward(const OpShape& s, Memory& m, Dtype d = Dtype::f32)
      : TableCase("rmsnorm_forward", s, {"rstd", "out"}, d),
        x_(random_array({s.N(), s.C}, 81, m, -2.0f, 3.0f)),
        w_(random_array({s.C}, 82, m)),
        out_(overwritten({s.N(), s.C}, m, d)),
        rstd_(overwritten({s.N()}, m)) {}
  void reset() override {
    out_.reset();
    rstd_.reset();
  }
  void run(Backend& be) override { be.rmsnorm_forward(out_.t(), rstd_.t(), x_.t(), w_.t()); }
  std::vector<OpOutput> outputs() override { return {out(0, rstd_.host()), out(1, out_.host())}; }

 private:
  Array x_, w_;        // (N,C), (C)
  Output out_, rstd_;  // (N,C), (N)
};

class RmsnormBackward final : public TableCase {
 public:
  RmsnormBackward(const OpShape& s, Memory& m)
      : TableCase("rmsnorm_backward", s, {"dinp", "dweight"}),
        x_(random_array({s.N(), s.C}, 81, m, -2.0f, 3.0f)),
        w_(random_array({s.C}, 82, m)),
        dout_(random_array({s.N(), s.C}, 84, m)),
        dx_(accumulated({s.N(), s.C}, 85, m)),
        dw_(accumulated({s.C}, 86, m)) {
    // The forward's rstd, from the reference on host copies.
    Memory& h = host_memory();
    const Array x = array_of({s.N(), s.C}, x_.host(), h), w = array_of({s.C}, w_.host(), h);
    Array out({s.N(), s.C}, h), rstd({s.N()}, h);
    make_reference_backend()->rmsnorm_forward(out.t(), rstd.t(), x.t(), w.t());
    rstd_ = array_of({s.N()}, rstd.host(), m);
  }
  void reset() override {
    dx_.reset();
    dw_.reset();
  }
  void run(Backend& be) override { be.rmsnorm_backward(dx_.t(), dw_.t(), dout_.t(), x_.t(), w_.t(), rstd_.t()); }
  std::vector<OpOutput> outputs() override { return {out(0, dx_.host()), out(1, dw_.host())}; }

 private:
  Array x_, w_, dout_, rstd_;  // (N,C), (C), (N,C), (N)
  Output dx_, dw_;             // (N,C), (C), both +=
};

int NH(const OpShape& s) { return static_cast<int>(s.NH); }
int KVH(const OpShape& s) { return static_cast<int>(s.kv_heads()); }

// The forward's out (B,T,C) and lse (B,NH,T) of qkv, from the reference on
// a host copy, uploaded to `m`: attention_backward's saved activations.
std::pair<Array, Array> reference_attention(const Array& qkv, const OpShape& s, Memory& m, Dtype out_dtype) {
  Memory& h = host_memory();
  const Array q = array_of(qkv.dims(), qkv.host(), h);
  Array out({s.B, s.T, s.C}, h), lse({s.B, s.NH, s.T}, h);
  make_reference_backend()->attention_forward(out.t(), lse.t(), q.t(), NH(s), KVH(s));
  return {array_of(out.dims(), out.host(), m, out_dtype), array_of(lse.dims(), lse.host(), m)};
}

// What the bf16 attention adds to the f32 rows' bounds, element by element,
// derived from the case's own inputs (the f32 rows keep covering fast_exp,
// the order of fp32 sums and the given lse). The bf16 CPU backend's attention
// (kernels/cpu/attention.cpp) rounds q, k, v and dO to bf16, multiplies with
// fp32 sums, and rounds P and dS to bf16 before the products that take them.
// Below, p, dP = dO . v, D = sum p dP and dS = p (dP - D) scale are the exact
// values (double, from the f32 inputs); ub = 2^-8, u = 2^-24.
//   * A score: two bf16 roundings per product and an HS-term fp32 sum, then
//     the scale: |ds_j| <= e_j = scale (2 ub + ub^2 + 2 (HS+1) u (1+ub)^2 + 2u) sum |q||k_j|.
//   * Forward: a softmax of scores each within e_j <= E moves each p_j by a
//     factor within e^{+-2E}; P and v are rounded (1 + ub each) and summed
//     over <= T terms in fp32, so out_i is within W_i (e^{2E} (1+ub)^2
//     (1 + 2(T+1)u) - 1), W_i = sum_j p_j |v_ji|; lse is 1-Lipschitz: E.
//   * Backward (P = exp(s - lse) with the given lse: a factor e^{+-e_j},
//     rho_j = e^{e_j} - 1): dP_j within f_j = (2 ub + ub^2 + 2 (HS+1) u (1+ub)^2)
//     sum |dO||v_j|; D within g = sum_j [p rho |dP| + p (1+rho) f] + 2(T+1)u
//     sum_j p (1+rho)(|dP| + f); dS within h_j = scale [p rho |dP - D| + p
//     (1+rho)(f + g)], and after its bf16 rounding and three fp32 operations
//     sigma_j = h_j (1+ub) + ub |dS_j| + 4u (|dS_j| + h_j); the rounded P within
//     pi_j = p ((1+rho)(1+ub) - 1). Then dQ_t = sum_j dS_j k_j, dK_j = sum_t
//     dS_tj q_t (over the group's G heads) and dV_j = sum_t P_tj dO_t each
//     add, per term, the operand errors times the other operand (k, q and dO
//     rounded too: 1 + ub) and 2(K+1)u of the terms' magnitudes for their fp32
//     sums (K = T, or G T for dK and dV).
//   The ring's blocks (attention_block_*, bf16 products alike) follow the
//   same steps with these changes: a merged forward row (an earlier block's
//   keys, then its own block's) normalises P over each block and weights the
//   two blocks' outputs by their log-sum-exps, each within E, so each term
//   p_j v_j moves by a factor within e^{+-4E} (1+ub)^2 and the merge's fp32
//   operations add 8u: W_i (e^{4E} (1+ub)^2 (1 + 2(K+1)u) (1+8u) - 1) over
//   the K = 2T keys, and lse within E + 4u (|lse| + 1). A block's backward
//   takes P = exp(s - lse) with the given (merged) lse, and D = dO . O from
//   the given fp32 output, the same fp32 dot on both sides: g = 0 (its fp32
//   error is the f32 row's); its sums over keys run over the block's keys.
struct AttentionBf16Bounds {
  std::vector<double> lse, out, dq, dk, dv;  // (B,NH,T), (B,T,NH HS), (B,T,NH HS), (B,K,KVH HS) twice
};

// One attention's operands as the bounds read them (host values, widened):
// query row t of (b, h) sees keys 0 .. keys(t) - 1 of its key/value head g.
struct BoundOperands {
  int64_t B, T, NH, KVH, HS, K;  // K: the most keys a row sees, and the key index range of dk and dv
  std::function<double(int64_t b, int64_t t, int64_t h, int64_t d)> q, dO, O;
  std::function<double(int64_t b, int64_t j, int64_t g, int64_t d)> k, v;
  std::function<int64_t(int64_t t)> keys;
  std::function<double(int64_t b, int64_t h, int64_t t)> lse;  // set: a block's backward with the given lse and O
  bool merged = false;                                         // a forward row over two merged blocks
};

AttentionBf16Bounds attention_bf16_bounds(const BoundOperands& x, bool backward) {
  const int64_t B = x.B, T = x.T, NH = x.NH, KVH = x.KVH, HS = x.HS, G = NH / KVH, K = x.K;
  const double u = 0x1p-24, ub = 0x1p-8, scale = 1.0 / std::sqrt(static_cast<double>(HS));
  const double prod = 2 * ub + ub * ub + 2 * static_cast<double>(HS + 1) * u * (1 + ub) * (1 + ub);
  const double acc_k = 2 * static_cast<double>(K + 1) * u, acc_gt = 2 * static_cast<double>(G * T + 1) * u;
  const double spread = x.merged ? 4 : 2, merge_u = x.merged ? 8 * u : 0;
  AttentionBf16Bounds r;
  r.lse.assign(static_cast<size_t>(B * NH * T), 0.0);
  r.out.assign(static_cast<size_t>(B * T * NH * HS), 0.0);
  if (backward) {
    r.dq.assign(static_cast<size_t>(B * T * NH * HS), 0.0);
    r.dk.assign(static_cast<size_t>(B * K * KVH * HS), 0.0);
    r.dv.assign(r.dk.size(), 0.0);
  }
  std::vector<double> p(static_cast<size_t>(K)), e(p.size()), dP(p.size()), f(p.size());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t g = h / G;
      auto qo = [&](int64_t t, int64_t d) { return static_cast<size_t>((b * T + t) * NH * HS + h * HS + d); };
      auto ko = [&](int64_t j, int64_t d) { return static_cast<size_t>((b * K + j) * KVH * HS + g * HS + d); };
      for (int64_t t = 0; t < T; ++t) {
        const int64_t n = x.keys(t);
        double mx = -INFINITY, E = 0;
        for (int64_t j = 0; j < n; ++j) {
          double sc = 0, mag = 0;
          for (int64_t d = 0; d < HS; ++d) {
            sc += x.q(b, t, h, d) * x.k(b, j, g, d);
            mag += std::fabs(x.q(b, t, h, d) * x.k(b, j, g, d));
          }
          p[static_cast<size_t>(j)] = sc * scale;
          e[static_cast<size_t>(j)] = scale * (prod + 2 * u) * mag;
          mx = std::max(mx, sc * scale);
          E = std::max(E, e[static_cast<size_t>(j)]);
        }
        if (x.lse) {  // the given lse: P = exp(s - lse)
          for (int64_t j = 0; j < n; ++j) p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - x.lse(b, h, t));
        } else {
          double sum = 0;
          for (int64_t j = 0; j < n; ++j) sum += (p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - mx));
          for (int64_t j = 0; j < n; ++j) p[static_cast<size_t>(j)] /= sum;
          r.lse[static_cast<size_t>((b * NH + h) * T + t)] = x.merged ? E + 4 * u * (std::fabs(mx + std::log(sum)) + 1) : E;
          const double grow = std::exp(spread * E) * (1 + ub) * (1 + ub) * (1 + acc_k) * (1 + merge_u) - 1;
          for (int64_t d = 0; d < HS; ++d) {
            double w = 0;
            for (int64_t j = 0; j < n; ++j) w += p[static_cast<size_t>(j)] * std::fabs(x.v(b, j, g, d));
            r.out[qo(t, d)] = w * grow;
          }
        }
        if (!backward) continue;
        double D = 0;  // sum_j p dP over the row's keys, or dO . O of the given output
        for (int64_t j = 0; j < n; ++j) {
          double dp = 0, mag = 0;
          for (int64_t d = 0; d < HS; ++d) {
            dp += x.dO(b, t, h, d) * x.v(b, j, g, d);
            mag += std::fabs(x.dO(b, t, h, d) * x.v(b, j, g, d));
          }
          dP[static_cast<size_t>(j)] = dp;
          f[static_cast<size_t>(j)] = prod * mag;
          if (!x.O) D += p[static_cast<size_t>(j)] * dp;
        }
        double gerr = 0;  // D's error: none beyond the f32 row's when it is dO . O of the given output
        if (x.O) {
          for (int64_t d = 0; d < HS; ++d) D += x.dO(b, t, h, d) * x.O(b, t, h, d);
        } else {
          double gD = 0, gacc = 0;
          for (int64_t j = 0; j < n; ++j) {
            const size_t J = static_cast<size_t>(j);
            const double rho = std::expm1(e[J]);
            gD += p[J] * rho * std::fabs(dP[J]) + p[J] * (1 + rho) * f[J];
            gacc += p[J] * (1 + rho) * (std::fabs(dP[J]) + f[J]);
          }
          gerr = gD + acc_k * gacc;
        }
        for (int64_t j = 0; j < n; ++j) {
          const size_t J = static_cast<size_t>(j);
          const double rho = std::expm1(e[J]);
          const double dS = p[J] * (dP[J] - D) * scale;
          const double hj = scale * (p[J] * rho * std::fabs(dP[J] - D) + p[J] * (1 + rho) * (f[J] + gerr));
          const double sigma = hj * (1 + ub) + ub * std::fabs(dS) + 4 * u * (std::fabs(dS) + hj);
          const double pi = p[J] * ((1 + rho) * (1 + ub) - 1);
          for (int64_t d = 0; d < HS; ++d) {
            const double k = std::fabs(x.k(b, j, g, d)), q = std::fabs(x.q(b, t, h, d)), o = std::fabs(x.dO(b, t, h, d));
            r.dq[qo(t, d)] += sigma * k * (1 + ub) + std::fabs(dS) * ub * k + acc_k * (std::fabs(dS) + sigma) * k * (1 + ub);
            r.dk[ko(j, d)] += sigma * q * (1 + ub) + std::fabs(dS) * ub * q + acc_gt * (std::fabs(dS) + sigma) * q * (1 + ub);
            r.dv[ko(j, d)] += pi * o * (1 + ub) + p[J] * ub * o + acc_gt * (p[J] + pi) * o * (1 + ub);
          }
        }
      }
    }
  }
  return r;
}

// Head h's element d of row t of a (B,T,C) array (dout, out), widened.
std::function<double(int64_t, int64_t, int64_t, int64_t)> head_values(const std::vector<float>& a, int64_t T,
                                                                       int64_t C, int64_t HS) {
  return [&a, T, C, HS](int64_t b, int64_t t, int64_t h, int64_t d) {
    return static_cast<double>(a[static_cast<size_t>((b * T + t) * C + h * HS + d)]);
  };
}

// The whole causal attention's operands: qkv (B,T,W) and dout (B,T,C).
BoundOperands whole_attention(const OpShape& s, const std::vector<float>& qkv, const std::vector<float>& dout) {
  const int64_t T = s.T, NH = s.NH, KVH = s.kv_heads(), HS = s.HS(), C = s.C, W = s.qkv_width();
  BoundOperands x{s.B, T, NH, KVH, HS, T, {}, {}, {}, {}, {}, [](int64_t t) { return t + 1; }, {}, false};
  auto at = [&qkv, W, T](int64_t b, int64_t t, int64_t col) { return static_cast<double>(qkv[static_cast<size_t>((b * T + t) * W + col)]); };
  x.q = [at, HS](int64_t b, int64_t t, int64_t h, int64_t d) { return at(b, t, h * HS + d); };
  x.k = [at, NH, HS](int64_t b, int64_t j, int64_t g, int64_t d) { return at(b, j, (NH + g) * HS + d); };
  x.v = [at, NH, KVH, HS](int64_t b, int64_t j, int64_t g, int64_t d) { return at(b, j, (NH + KVH + g) * HS + d); };
  x.dO = head_values(dout, T, C, HS);
  return x;
}

// The whole attention's bounds into dqkv's layout (B,T,W).
std::vector<double> qkv_layout(const OpShape& s, const AttentionBf16Bounds& r) {
  const int64_t T = s.T, NH = s.NH, KVH = s.kv_heads(), HS = s.HS(), W = s.qkv_width();
  std::vector<double> out(static_cast<size_t>(s.B * T * W), 0.0);
  for (int64_t bt = 0; bt < s.B * T; ++bt) {
    for (int64_t i = 0; i < NH * HS; ++i) out[static_cast<size_t>(bt * W + i)] = r.dq[static_cast<size_t>(bt * NH * HS + i)];
    for (int64_t i = 0; i < KVH * HS; ++i) {
      out[static_cast<size_t>(bt * W + NH * HS + i)] = r.dk[static_cast<size_t>(bt * KVH * HS + i)];
      out[static_cast<size_t>(bt * W + (NH + KVH) * HS + i)] = r.dv[static_cast<size_t>(bt * KVH * HS + i)];
    }
  }
  return out;
}

// qkv rows are W = (NH + 2 KVH) HS wide: 3C for multi-head (op_costs.h).
class AttentionForward final : public TableCase {
 public:
  // `out_dtype`: the output's type, the case's own by default (the bf16 row
  // ".f32out" keeps an f32 output under bf16 products, as generation does).
  AttentionForward(const OpShape& s, Memory& m, Dtype d = Dtype::f32, std::optional<Dtype> out_dtype = {})
      : TableCase("attention_forward", s, {"lse", "out"}, d),
        qkv_(random_array({s.B, s.T, s.qkv_width()}, 31, m, -2.0f, 2.0f)),
        out_(overwritten({s.B, s.T, s.C}, m, out_dtype.value_or(d))),
        lse_(overwritten({s.B, s.NH, s.T}, m)) {}
  void reset() override {
    out_.reset();
    lse_.reset();
  }
  void run(Backend& be) override { be.attention_forward(out_.t(), lse_.t(), qkv_.t(), NH(s_), KVH(s_)); }
  std::vector<OpOutput> outputs() override { return {out(0, lse_.host()), out(1, out_.host())}; }
  std::vector<Tolerance> tolerances() override {
    if (dtype_ != Dtype::bf16) return TableCase::tolerances();
    const std::vector<float> q = qkv_.host();
    AttentionBf16Bounds b = attention_bf16_bounds(whole_attention(s_, q, {}), false);
    return {tolerance(op_, "lse", dtype_, ToleranceFacts{s_, {}, {}, std::move(b.lse)}),
            tolerance(op_, "out", dtype_, ToleranceFacts{s_, {}, {}, std::move(b.out)})};
  }

 private:
  Array qkv_;         // (B,T,W)
  Output out_, lse_;  // (B,T,C), (B,NH,T)
};

class AttentionBackward final : public TableCase {
 public:
  AttentionBackward(const OpShape& s, Memory& m, Dtype d = Dtype::f32)
      : TableCase("attention_backward", s, {"dqkv"}, d),
        qkv_(random_array({s.B, s.T, s.qkv_width()}, 31, m, -2.0f, 2.0f)),
        dout_(random_array({s.B, s.T, s.C}, 32, m)),
        dqkv_(overwritten({s.B, s.T, s.qkv_width()}, m)) {
    std::tie(out_, lse_) = reference_attention(qkv_, s, m, d);
  }
  void reset() override { dqkv_.reset(); }
  void run(Backend& be) override {
    be.attention_backward(dqkv_.t(), dout_.t(), out_.t(), lse_.t(), qkv_.t(), NH(s_), KVH(s_));
  }
  std::vector<OpOutput> outputs() override { return {out(0, dqkv_.host())}; }
  std::vector<Tolerance> tolerances() override {
    if (dtype_ != Dtype::bf16) return TableCase::tolerances();
    const std::vector<float> q = qkv_.host(), d = dout_.host();
    const AttentionBf16Bounds b = attention_bf16_bounds(whole_attention(s_, q, d), true);
    return {tolerance(op_, "dqkv", dtype_, ToleranceFacts{s_, {}, {}, qkv_layout(s_, b)})};
  }

 private:
  Array qkv_, dout_, out_, lse_;  // (B,T,W), (B,T,C), (B,T,C), (B,NH,T)
  Output dqkv_;                   // (B,T,W), '=' over its 7s
};

// Context parallelism's ring attention (backend.h attention_block_*): the
// queries of qkv (B,T,W) against blocks of T keys and values kv (B,T,2 KVH HS).
// `first`: the causal block written (a query chunk's own block, the first it
// sees); else an earlier chunk's block (every key visible) merged into the
// causal block's out and lse (the reference's, on host copies).
Array random_kv(const OpShape& s, uint64_t seed, Memory& m) {
  return random_array({s.B, s.T, 2 * s.kv_heads() * s.HS()}, seed, m, -2.0f, 2.0f);
}

// The causal block's out (B,T,C) and lse (B,NH,T), then (`merged`) the
// earlier block merged into them: the reference's, uploaded to `m`.
std::pair<Array, Array> reference_blocks(const Array& qkv, const Array& own, const Array* earlier, const OpShape& s,
                                         Memory& m) {
  Memory& h = host_memory();
  const Array q = array_of(qkv.dims(), qkv.host(), h), k0 = array_of(own.dims(), own.host(), h);
  Array out({s.B, s.T, s.C}, h), lse({s.B, s.NH, s.T}, h);
  const std::unique_ptr<Backend> ref = make_reference_backend();
  ref->attention_block_forward(out.t(), lse.t(), q.t(), k0.t(), NH(s), KVH(s), true, false);
  if (earlier != nullptr) {
    const Array k1 = array_of(earlier->dims(), earlier->host(), h);
    ref->attention_block_forward(out.t(), lse.t(), q.t(), k1.t(), NH(s), KVH(s), false, true);
  }
  return {array_of(out.dims(), out.host(), m), array_of(lse.dims(), lse.host(), m)};
}

// The ring blocks' operands for the bf16 bounds (attention_bf16_bounds):
// qkv's queries against the block `kv` (B,T,2 KVH HS) of T keys, preceded
// (`earlier`, a merged forward row) by the block `earlier` with every key visible.
BoundOperands block_operands(const OpShape& s, const std::vector<float>& qkv, const std::vector<float>& kv,
                             const std::vector<float>* earlier, bool causal) {
  const int64_t T = s.T, NH = s.NH, KVH = s.kv_heads(), HS = s.HS(), W = s.qkv_width(), KV = 2 * KVH * HS;
  const int64_t before = earlier != nullptr ? T : 0;
  BoundOperands x{s.B, T, NH, KVH, HS, before + T, {}, {}, {}, {}, {},
                  [before, T, causal](int64_t t) { return before + (causal ? t + 1 : T); }, {}, earlier != nullptr};
  x.q = [&qkv, T, W, HS](int64_t b, int64_t t, int64_t h, int64_t d) {
    return static_cast<double>(qkv[static_cast<size_t>((b * T + t) * W + h * HS + d)]);
  };
  auto at = [&kv, earlier, before, T, KV](int64_t b, int64_t j, int64_t col) {
    const std::vector<float>& from = j < before ? *earlier : kv;
    return static_cast<double>(from[static_cast<size_t>((b * T + (j < before ? j : j - before)) * KV + col)]);
  };
  x.k = [at, HS](int64_t b, int64_t j, int64_t g, int64_t d) { return at(b, j, g * HS + d); };
  x.v = [at, KVH, HS](int64_t b, int64_t j, int64_t g, int64_t d) { return at(b, j, (KVH + g) * HS + d); };
  return x;
}

class AttentionBlockForward final : public TableCase {
 public:
  AttentionBlockForward(const OpShape& s, Memory& m, bool first = false, Dtype d = Dtype::f32)
      : TableCase("attention_block_forward", s, {"lse", "out"}, d),
        first_(first),
        qkv_(random_array({s.B, s.T, s.qkv_width()}, 41, m, -2.0f, 2.0f)),
        kv_(random_kv(s, first ? 42 : 43, m)) {
    if (first) {
      out_ = overwritten({s.B, s.T, s.C}, m);
      lse_ = overwritten({s.B, s.NH, s.T}, m);
    } else {  // the causal block's result, into which this one merges
      const auto [out, lse] = reference_blocks(qkv_, random_kv(s, 42, host_memory()), nullptr, s, host_memory());
      out_ = Output(out.dims(), out.host(), m);
      lse_ = Output(lse.dims(), lse.host(), m);
    }
  }
  void reset() override {
    out_.reset();
    lse_.reset();
  }
  void run(Backend& be) override {
    be.attention_block_forward(out_.t(), lse_.t(), qkv_.t(), kv_.t(), NH(s_), KVH(s_), first_, !first_);
  }
  std::vector<OpOutput> outputs() override { return {out(0, lse_.host()), out(1, out_.host())}; }
  // bf16 products: the derived bounds over the row's keys (the earlier block's, then its own).
  std::vector<Tolerance> tolerances() override {
    if (dtype_ != Dtype::bf16) return TableCase::tolerances();
    const std::vector<float> q = qkv_.host(), kv = kv_.host(), own = random_kv(s_, 42, host_memory()).host();
    AttentionBf16Bounds b = attention_bf16_bounds(
        first_ ? block_operands(s_, q, kv, nullptr, true) : block_operands(s_, q, own, &kv, true), false);
    return {tolerance(op_, "lse", dtype_, ToleranceFacts{s_, {}, {}, std::move(b.lse)}),
            tolerance(op_, "out", dtype_, ToleranceFacts{s_, {}, {}, std::move(b.out)})};
  }

 private:
  bool first_;
  Array qkv_, kv_;    // (B,T,W), (B,T,2 KVH HS)
  Output out_, lse_;  // (B,T,C), (B,NH,T): '=' (first) or merged into
};

// The backward of one block (causal, or `earlier`: every key visible) given
// the final out and lse of the two blocks merged and a random dout: dqkv's
// query columns and dkv accumulate onto random starts.
class AttentionBlockBackward final : public TableCase {
 public:
  AttentionBlockBackward(const OpShape& s, Memory& m, bool earlier = false, Dtype d = Dtype::f32)
      : TableCase("attention_block_backward", s, {"dqkv", "dkv"}, d),
        earlier_(earlier),
        qkv_(random_array({s.B, s.T, s.qkv_width()}, 41, m, -2.0f, 2.0f)),
        kv_(random_kv(s, earlier ? 43 : 42, m)),
        dout_(random_array({s.B, s.T, s.C}, 44, m)),
        dqkv_(accumulated({s.B, s.T, s.qkv_width()}, 45, m)),
        dkv_(accumulated({s.B, s.T, 2 * s.kv_heads() * s.HS()}, 46, m)) {
    const Array other = random_kv(s, 43, host_memory());
    std::tie(out_, lse_) = reference_blocks(qkv_, random_kv(s, 42, host_memory()), &other, s, m);
  }
  void reset() override {
    dqkv_.reset();
    dkv_.reset();
  }
  void run(Backend& be) override {
    be.attention_block_backward(dqkv_.t(), dkv_.t(), dout_.t(), out_.t(), lse_.t(), qkv_.t(), kv_.t(), NH(s_),
                                KVH(s_), !earlier_);
  }
  std::vector<OpOutput> outputs() override { return {out(0, dqkv_.host()), out(1, dkv_.host())}; }
  // bf16 products: the derived bounds over the block's keys, with the given lse and D = dO . O.
  std::vector<Tolerance> tolerances() override {
    if (dtype_ != Dtype::bf16) return TableCase::tolerances();
    const std::vector<float> q = qkv_.host(), kv = kv_.host(), dout = dout_.host(), o = out_.host(), l = lse_.host();
    BoundOperands x = block_operands(s_, q, kv, nullptr, !earlier_);
    const int64_t T = s_.T, NH = s_.NH, HS = s_.HS(), C = s_.C, W = s_.qkv_width();
    x.dO = head_values(dout, T, C, HS);
    x.O = head_values(o, T, C, HS);
    x.lse = [&l, T, NH](int64_t b, int64_t h, int64_t t) { return static_cast<double>(l[static_cast<size_t>((b * NH + h) * T + t)]); };
    const AttentionBf16Bounds b = attention_bf16_bounds(x, true);
    std::vector<double> dq(static_cast<size_t>(s_.B * T * W), 0.0), dkv(static_cast<size_t>(s_.B * T * x.KVH * 2 * HS));
    for (int64_t bt = 0; bt < s_.B * T; ++bt) {
      for (int64_t i = 0; i < NH * HS; ++i) dq[static_cast<size_t>(bt * W + i)] = b.dq[static_cast<size_t>(bt * NH * HS + i)];
      for (int64_t i = 0; i < x.KVH * HS; ++i) {
        dkv[static_cast<size_t>(bt * 2 * x.KVH * HS + i)] = b.dk[static_cast<size_t>(bt * x.KVH * HS + i)];
        dkv[static_cast<size_t>((bt * 2 + 1) * x.KVH * HS + i)] = b.dv[static_cast<size_t>(bt * x.KVH * HS + i)];
      }
    }
    return {tolerance(op_, "dqkv", dtype_, ToleranceFacts{s_, {}, {}, std::move(dq)}),
            tolerance(op_, "dkv", dtype_, ToleranceFacts{s_, {}, {}, std::move(dkv)})};
  }

 private:
  bool earlier_;
  Array qkv_, kv_, dout_, out_, lse_;  // (B,T,W), (B,T,2 KVH HS), (B,T,C), (B,T,C), (B,NH,T)
  Output dqkv_, dkv_;                  // +=
};

// One query (the last of T rows) against T keys: qkv is batch row 0 of
// attention_forward's qkv at the same shape (same seed, a prefix).
class AttentionDecode final : public TableCase {
 public:
  AttentionDecode(const OpShape& s, Memory& m)
      : TableCase("attention_decode", s, {"out"}),
        qkv_(random_array({1, s.T, s.qkv_width()}, 31, m, -2.0f, 2.0f)),
        out_(overwritten({1, 1, s.C}, m)) {}
  void reset() override { out_.reset(); }
  void run(Backend& be) override { be.attention_decode(out_.t(), qkv_.t(), NH(s_), KVH(s_)); }
  std::vector<OpOutput> outputs() override { return {out(0, out_.host())}; }

 private:
  Array qkv_;   // (1,T,W)
  Output out_;  // (1,1,C)
};

// rope_forward or rope_backward, in place on a random qkv (B,T,W) (or dqkv):
// its value heads must come back untouched. Rows start at position 5 (a
// generation step's offset), theta 10000 (RoFormer's).
class Rope final : public TableCase {
 public:
  Rope(const std::string& op, const OpShape& s, Memory& m)
      : TableCase(op, s, {op == "rope_forward" ? "qkv" : "dqkv"}),
        backward_(op == "rope_backward"),
        x_(accumulated({s.B, s.T, s.qkv_width()}, backward_ ? 34 : 33, m)) {}
  void reset() override { x_.reset(); }
  void run(Backend& be) override {
    if (backward_)
      be.rope_backward(x_.t(), NH(s_), KVH(s_), kPos0, kTheta);
    else
      be.rope_forward(x_.t(), NH(s_), KVH(s_), kPos0, kTheta);
  }
  std::vector<OpOutput> outputs() override { return {out(0, x_.host())}; }

 private:
  static constexpr int kPos0 = 5;
  static constexpr float kTheta = 10000.0f;
  bool backward_;
  Output x_;  // (B,T,W), updated in place
};

class GeluForward final : public TableCase {
 public:
  GeluForward(const OpShape& s, Memory& m, Dtype d = Dtype::f32)
      : TableCase("gelu_forward", s, {"out"}, d),
        x_(random_array({s.N(), 4 * s.C}, 41, m, -6.0f, 6.0f)),
        out_(overwritten({s.N(), 4 * s.C}, m, d)) {}
  void reset() override { out_.reset(); }
  void run(Backend& be) override { be.gelu_forward(out_.t(), x_.t()); }
  std::vector<OpOutput> outputs() override { return {out(0, out_.host())}; }

 private:
  Array x_;     // (N,4C)
  Output out_;  // (N,4C)
};

class GeluBackward final : public TableCase {
 public:
  GeluBackward(const OpShape& s, Memory& m)
      : TableCase("gelu_backward", s, {"dinp"}),
        x_(random_array({s.N(), 4 * s.C}, 41, m, -6.0f, 6.0f)),
        dout_(random_array({s.N(), 4 * s.C}, 42, m)),
        dx_(overwritten({s.N(), 4 * s.C}, m)) {}
  void reset() override { dx_.reset(); }
  void run(Backend& be) override { be.gelu_backward(dx_.t(), dout_.t(), x_.t()); }
  // dinp may alias dout.
  bool run_in_place(Backend& be) override {
    be.copy(dx_.t(), dout_.t());
    be.gelu_backward(dx_.t(), dx_.t(), x_.t());
    return true;
  }
  std::vector<OpOutput> outputs() override { return {out(0, dx_.host())}; }

 private:
  Array x_, dout_;  // (N,4C)
  Output dx_;       // (N,4C)
};

// relu's input: U(-1,1) with every 8th element exactly 0 (where the
// contract fixes the derivative at 0).
Array relu_input(const OpShape& s, Memory& m) {
  std::vector<float> x = random_values(static_cast<size_t>(s.N() * 4 * s.C), 43);
  for (size_t i = 0; i < x.size(); i += 8) x[i] = 0.0f;
  return array_of({s.N(), 4 * s.C}, x, m);
}

class ReluForward final : public TableCase {
 public:
  ReluForward(const OpShape& s, Memory& m, Dtype d = Dtype::f32)
      : TableCase("relu_forward", s, {"out"}, d), x_(relu_input(s, m)), out_(overwritten({s.N(), 4 * s.C}, m, d)) {}
  void reset() override { out_.reset(); }
  void run(Backend& be) override { be.relu_forward(out_.t(), x_.t()); }
  std::vector<OpOutput> outputs() override { return {out(0, out_.host())}; }

 private:
  Array x_;     // (N,4C)
  Output out_;  // (N,4C)
};

// relu_backward or silu_backward (same arguments and aliasing as gelu_backward).
class ActivationBackward final : public TableCase {
 public:
  ActivationBackward(const std::string& op, const OpShape& s, Memory& m)
      : TableCase(op, s, {"dinp"}),
        relu_(op == "relu_backward"),
        x_(relu_ ? relu_input(s, m) : random_array({s.N(), 4 * s.C}, 45, m, -6.0f, 6.0f)),
        dout_(random_array({s.N(), 4 * s.C}, relu_ ? 44 : 46, m)),
        dx_(overwritten({s.N(), 4 * s.C}, m)) {}
  void reset() override { dx_.reset(); }
  void run(Backend& be) override { call(be, dx_.t(), dout_.t()); }
  // dinp may alias dout.
  bool run_in_place(Backend& be) override {
    be.copy(dx_.t(), dout_.t());
    call(be, dx_.t(), dx_.t());
    return true;
  }
  std::vector<OpOutput> outputs() override { return {out(0, dx_.host())}; }

 private:
  void call(Backend& be, Tensor dinp, Tensor dout) {
    if (relu_)
      be.relu_backward(dinp, dout, x_.t());
    else
      be.silu_backward(dinp, dout, x_.t());
  }
  bool relu_;
  Array x_, dout_;  // (N,4C)
  Output dx_;       // (N,4C)
};

class SiluForward final : public TableCase {
 public:
  SiluForward(const OpShape& s, Memory& m, Dtype d = Dtype::f32)
      : TableCase("silu_forward", s, {"out"}, d),
        x_(random_array({s.N(), 4 * s.C}, 45, m, -6.0f, 6.0f)),
        out_(overwritten({s.N(), 4 * s.C}, m, d)) {}
  void reset() override { out_.reset(); }
  void run(Backend& be) override { be.silu_forward(out_.t(), x_.t()); }
  std::vector<OpOutput> outputs() override { return {out(0, out_.host())}; }

 private:
  Array x_;     // (N,4C)
  Output out_;  // (N,4C)
};

// SwiGLU's input (N,8C): per row the gate (4C values, U(-6,6), as silu's)
// then the up projection (4C values, U(-1,1)); row r depends only on r.
Array swiglu_input(const OpShape& s, Memory& m) {
  const size_t H = static_cast<size_t>(4 * s.C), rows = static_cast<size_t>(s.N());
  const std::vector<float> g = random_values(rows * H, 47, -6.0f, 6.0f), u = random_values(rows * H, 48);
  std::vector<float> x(rows * 2 * H);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < H; ++j) {
      x[r * 2 * H + j] = g[r * H + j];
      x[r * 2 * H + H + j] = u[r * H + j];
    }
  }
  return array_of({s.N(), 8 * s.C}, x, m);
}

class SwigluForward final : public TableCase {
 public:
  SwigluForward(const OpShape& s, Memory& m, Dtype d = Dtype::f32)
      : TableCase("swiglu_forward", s, {"out"}, d), x_(swiglu_input(s, m)),
        out_(overwritten({s.N(), 4 * s.C}, m, d)) {}
  void reset() override { out_.reset(); }
  void run(Backend& be) override { be.swiglu_forward(out_.t(), x_.t()); }
  std::vector<OpOutput> outputs() override { return {out(0, out_.host())}; }

 private:
  Array x_;     // (N,8C)
  Output out_;  // (N,4C)
};

class SwigluBackward final : public TableCase {
 public:
  SwigluBackward(const OpShape& s, Memory& m)
      : TableCase("swiglu_backward", s, {"dinp"}),
        x_(swiglu_input(s, m)),
        dout_(random_array({s.N(), 4 * s.C}, 49, m)),
        dx_(overwritten({s.N(), 8 * s.C}, m)) {}
  void reset() override { dx_.reset(); }
  void run(Backend& be) override { be.swiglu_backward(dx_.t(), dout_.t(), x_.t()); }
  std::vector<OpOutput> outputs() override { return {out(0, dx_.host())}; }

 private:
  Array x_, dout_;  // (N,8C), (N,4C)
  Output dx_;       // (N,8C), no aliasing
};

class ResidualForward final : public TableCase {
 public:
  ResidualForward(const OpShape& s, Memory& m)
      : TableCase("residual_forward", s, {"out"}),
        a_(random_array({s.N(), s.C}, 51, m)),
        b_(random_array({s.N(), s.C}, 52, m)),
        out_(overwritten({s.N(), s.C}, m)) {}
  void reset() override { out_.reset(); }
  void run(Backend& be) override { be.residual_forward(out_.t(), a_.t(), b_.t()); }
  std::vector<OpOutput> outputs() override { return {out(0, out_.host())}; }

 private:
  Array a_, b_;  // (N,C)
  Output out_;   // (N,C)
};

class CrossentropyForward final : public TableCase {
 public:
  CrossentropyForward(const OpShape& s, Memory& m)
      : TableCase("crossentropy_forward", s, {"losses"}),
        z_(random_array({s.N(), s.V}, 61, m, -5.0f, 5.0f)),
        tgt_(random_tokens(static_cast<size_t>(s.N()), s.V, 62)),
        loss_(overwritten({s.N()}, m)) {}
  void reset() override { loss_.reset(); }
  void run(Backend& be) override { be.crossentropy_forward(loss_.t(), z_.t(), tgt_.data()); }
  std::vector<OpOutput> outputs() override { return {out(0, loss_.host())}; }

 private:
  Array z_;                   // (N,V)
  std::vector<int32_t> tgt_;  // (N), host
  Output loss_;               // (N)
};

class CrossentropyBackward final : public TableCase {
 public:
  CrossentropyBackward(const OpShape& s, Memory& m)
      : TableCase("crossentropy_backward", s, {"dlogits"}),
        z_(random_array({s.N(), s.V}, 61, m, -5.0f, 5.0f)),
        tgt_(random_tokens(static_cast<size_t>(s.N()), s.V, 62)),
        dz_(overwritten({s.N(), s.V}, m)) {}
  void reset() override { dz_.reset(); }
  void run(Backend& be) override { be.crossentropy_backward(dz_.t(), z_.t(), tgt_.data(), dloss()); }
  // dlogits may alias logits.
  bool run_in_place(Backend& be) override {
    be.copy(dz_.t(), z_.t());
    be.crossentropy_backward(dz_.t(), dz_.t(), tgt_.data(), dloss());
    return true;
  }
  std::vector<OpOutput> outputs() override { return {out(0, dz_.host())}; }

 private:
  // The mean loss's weight per position (tolerances.cpp assumes it).
  float dloss() const { return 1.0f / static_cast<float>(s_.N()); }
  Array z_;                   // (N,V)
  std::vector<int32_t> tgt_;  // (N), host
  Output dz_;                 // (N,V)
};

// The vocabulary-parallel cross-entropy's ops on one shard: the columns
// [V, 2V) of a vocabulary of 2V - 3 entries (its last 3 columns padding), with
// targets over the whole vocabulary (about half of them in the shard).
constexpr int64_t kShardPadding = 3;
int64_t shard_vocab(const OpShape& s) { return 2 * s.V - kShardPadding; }

class CrossentropyShardStats final : public TableCase {
 public:
  CrossentropyShardStats(const OpShape& s, Memory& m)
      : TableCase("crossentropy_shard_stats", s, {"lse", "target_logit"}),
        z_(random_array({s.N(), s.V}, 63, m, -5.0f, 5.0f)),
        tgt_(random_tokens(static_cast<size_t>(s.N()), shard_vocab(s), 64)),
        lse_(overwritten({s.N()}, m)),
        picked_(overwritten({s.N()}, m)) {}
  void reset() override {
    lse_.reset();
    picked_.reset();
  }
  void run(Backend& be) override {
    be.crossentropy_shard_stats(lse_.t(), picked_.t(), z_.t(), tgt_.data(), s_.V, shard_vocab(s_));
  }
  std::vector<OpOutput> outputs() override { return {out(0, lse_.host()), out(1, picked_.host())}; }

 private:
  Array z_;                   // (N,V): the shard's columns
  std::vector<int32_t> tgt_;  // (N), host
  Output lse_, picked_;       // (N), (N)
};

// The shards' statistics of kCombineShards ranks, put together.
constexpr int64_t kCombineShards = 3;

class CrossentropyShardCombine final : public TableCase {
 public:
  CrossentropyShardCombine(const OpShape& s, Memory& m)
      : TableCase("crossentropy_shard_combine", s, {"losses", "lse"}),
        parts_(random_array({kCombineShards + 1, s.N()}, 65, m, -5.0f, 5.0f)),
        loss_(overwritten({s.N()}, m)),
        lse_(overwritten({s.N()}, m)) {}
  void reset() override {
    loss_.reset();
    lse_.reset();
  }
  void run(Backend& be) override { be.crossentropy_shard_combine(loss_.t(), lse_.t(), parts_.t()); }
  std::vector<OpOutput> outputs() override { return {out(0, loss_.host()), out(1, lse_.host())}; }

 private:
  Array parts_;         // (P+1, N)
  Output loss_, lse_;   // (N), (N)
};

class CrossentropyShardBackward final : public TableCase {
 public:
  CrossentropyShardBackward(const OpShape& s, Memory& m)
      : TableCase("crossentropy_shard_backward", s, {"dlogits"}),
        z_(random_array({s.N(), s.V}, 63, m, -5.0f, 5.0f)),
        lse_(random_array({s.N()}, 66, m, 5.0f, 10.0f)),
        tgt_(random_tokens(static_cast<size_t>(s.N()), shard_vocab(s), 64)),
        dz_(overwritten({s.N(), s.V}, m)) {}
  void reset() override { dz_.reset(); }
  void run(Backend& be) override {
    be.crossentropy_shard_backward(dz_.t(), z_.t(), lse_.t(), tgt_.data(), s_.V, shard_vocab(s_), dloss());
  }
  // dlogits may alias logits.
  bool run_in_place(Backend& be) override {
    be.copy(dz_.t(), z_.t());
    be.crossentropy_shard_backward(dz_.t(), dz_.t(), lse_.t(), tgt_.data(), s_.V, shard_vocab(s_), dloss());
    return true;
  }
  std::vector<OpOutput> outputs() override { return {out(0, dz_.host())}; }

 private:
  float dloss() const { return 1.0f / static_cast<float>(s_.N()); }
  Array z_, lse_;             // (N,V), (N): a log-sum-exp at least that of the shard's row
  std::vector<int32_t> tgt_;  // (N), host
  Output dz_;                 // (N,V)
};

class AdamUpdate final : public TableCase {
 public:
  AdamUpdate(const OpShape& s, Memory& m)
      : TableCase("adam_update", s, {"m", "v", "param"}),
        g_(random_array({s.P}, 72, m)),
        p_(accumulated({s.P}, 71, m)),
        m_(accumulated({s.P}, 73, m)),
        v_(accumulated({s.P}, 74, m, 0.0f, 1.0f)) {}
  void reset() override {
    p_.reset();
    m_.reset();
    v_.reset();
  }
  void run(Backend& be) override { be.adam_update(p_.t(), g_.t(), m_.t(), v_.t(), kCoefficients); }
  std::vector<OpOutput> outputs() override { return {out(0, m_.host()), out(1, v_.host()), out(2, p_.host())}; }

 private:
  // Every coefficient away from its neutral value, so each term is exercised.
  static constexpr AdamCoefficients kCoefficients{0.9f, 0.95f, 1e-8f, 1e-3f, 1.3f, 0.999f, 0.7f};
  Array g_;           // (P)
  Output p_, m_, v_;  // (P), updated in place
};

// sum_squares or sum of a flat buffer: one double.
class Reduction final : public TableCase {
 public:
  Reduction(const std::string& op, const OpShape& s, Memory& m)
      : TableCase(op, s, {"sum"}), squares_(op == "sum_squares"), g_(random_array({s.P}, 72, m)) {}
  void reset() override { result_ = std::numeric_limits<double>::quiet_NaN(); }
  void run(Backend& be) override { result_ = squares_ ? be.sum_squares(g_.t()) : be.sum(g_.t()); }
  std::vector<OpOutput> outputs() override { return {OpOutput{names_[0], {}, {result_}}}; }

 private:
  bool squares_;
  Array g_;  // (P)
  double result_ = std::numeric_limits<double>::quiet_NaN();
};

template <typename Case>
OpSpec spec(const std::string& op) {
  return {op, "", Dtype::f32,
          [](const OpShape& s, Memory& m) -> std::unique_ptr<OpCase> { return std::make_unique<Case>(s, m); }};
}

// The ".masked" variant of the embedding's cases: a third of the token ids
// negative (another vocabulary shard's tokens).
template <typename Case>
OpSpec masked_spec(const std::string& op) {
  return {op, "masked", Dtype::f32,
          [](const OpShape& s, Memory& m) -> std::unique_ptr<OpCase> { return std::make_unique<Case>(s, m, true); }};
}

// A variant whose case takes `true` for it (the ring attention's ".first" and ".earlier").
template <typename Case>
OpSpec variant_spec(const std::string& op, const std::string& variant) {
  return {op, variant, Dtype::f32,
          [](const OpShape& s, Memory& m) -> std::unique_ptr<OpCase> { return std::make_unique<Case>(s, m, true); }};
}

// A case class that takes its op's name (one class for two ops).
template <typename Case>
OpSpec named_spec(const std::string& op) {
  return {op, "", Dtype::f32,
          [op](const OpShape& s, Memory& m) -> std::unique_ptr<OpCase> { return std::make_unique<Case>(op, s, m); }};
}

// The bf16 row of a case (op_table(Dtype::bf16)): its stored operand in bf16.
template <typename Case>
OpSpec bf16_spec(const std::string& op) {
  return {op, "", Dtype::bf16, [](const OpShape& s, Memory& m) -> std::unique_ptr<OpCase> {
            return std::make_unique<Case>(s, m, Dtype::bf16);
          }};
}

// A ring block's bf16 row (bf16 products; `variant` "first" or "earlier": the case's flag).
template <typename Case>
OpSpec block_bf16_spec(const std::string& op, const std::string& variant) {
  return {op, variant, Dtype::bf16, [flag = !variant.empty()](const OpShape& s, Memory& m) -> std::unique_ptr<OpCase> {
            return std::make_unique<Case>(s, m, flag, Dtype::bf16);
          }};
}

// Both matrix products, with and without bias, in `dtype` (their input's).
void add_matmuls(std::vector<OpSpec>& v, Dtype dtype) {
  for (const char* op : {"matmul_forward", "matmul_backward"}) {
    const bool forward = op == std::string("matmul_forward");
    for (const bool bias : {true, false}) {
      v.push_back({op, bias ? "" : "nobias", dtype, [forward, bias, dtype](const OpShape& s, Memory& m) {
                     return forward ? make_matmul_forward(s, m, bias, dtype) : make_matmul_backward(s, m, bias, dtype);
                   }});
    }
  }
}

// The ".gqa" variant of a spec: its case at KVH = gqa_kv_heads(NH).
OpSpec grouped(OpSpec spec) {
  spec.variant = "gqa";
  spec.grouped = true;
  spec.make = [make = spec.make](const OpShape& s, Memory& m) {
    OpShape g = s;
    g.KVH = gqa_kv_heads(s.NH);
    return make(g, m);
  };
  return spec;
}

}  // namespace

const std::vector<OpSpec>& op_table(Dtype dtype) {
  static const std::vector<OpSpec> bf16_table = [] {
    std::vector<OpSpec> v = {bf16_spec<LayernormForward>("layernorm_forward"),
                             bf16_spec<RmsnormForward>("rmsnorm_forward")};
    add_matmuls(v, Dtype::bf16);
    for (const OpSpec& a : {bf16_spec<AttentionForward>("attention_forward"),
                            bf16_spec<AttentionBackward>("attention_backward")}) {
      v.push_back(a);
      v.push_back(grouped(a));
    }
    // The ring's blocks under bf16 products (their outputs stay f32).
    for (const bool variant : {false, true}) {
      for (const OpSpec& a : {block_bf16_spec<AttentionBlockForward>("attention_block_forward", variant ? "first" : ""),
                              block_bf16_spec<AttentionBlockBackward>("attention_block_backward",
                                                                      variant ? "earlier" : "")}) {
        v.push_back(a);
        v.push_back(grouped(a));
      }
    }
    // bf16 products into an f32 output (a bf16 run's generation arena); its
    // tolerance is the stored row's, which also allows the output's rounding.
    v.push_back({"attention_forward", "f32out", Dtype::bf16, [](const OpShape& s, Memory& m) -> std::unique_ptr<OpCase> {
                   return std::make_unique<AttentionForward>(s, m, Dtype::bf16, Dtype::f32);
                 }});
    v.push_back(bf16_spec<GeluForward>("gelu_forward"));
    v.push_back(bf16_spec<ReluForward>("relu_forward"));
    v.push_back(bf16_spec<SiluForward>("silu_forward"));
    v.push_back(bf16_spec<SwigluForward>("swiglu_forward"));
    return v;
  }();
  if (dtype == Dtype::bf16) return bf16_table;
  static const std::vector<OpSpec> table = [] {
    std::vector<OpSpec> v = {spec<EncoderForward>("encoder_forward"), masked_spec<EncoderForward>("encoder_forward"),
                             spec<EncoderBackward>("encoder_backward"),
                             masked_spec<EncoderBackward>("encoder_backward"),
                             spec<LayernormForward>("layernorm_forward"),
                             spec<LayernormBackward>("layernorm_backward"),
                             spec<RmsnormForward>("rmsnorm_forward"),
                             spec<RmsnormBackward>("rmsnorm_backward")};
    add_matmuls(v, Dtype::f32);
    for (const OpSpec& a : {spec<AttentionForward>("attention_forward"), spec<AttentionBackward>("attention_backward"),
                            spec<AttentionDecode>("attention_decode"), named_spec<Rope>("rope_forward"),
                            named_spec<Rope>("rope_backward"), spec<AttentionBlockForward>("attention_block_forward"),
                            variant_spec<AttentionBlockForward>("attention_block_forward", "first"),
                            spec<AttentionBlockBackward>("attention_block_backward"),
                            variant_spec<AttentionBlockBackward>("attention_block_backward", "earlier")}) {
      v.push_back(a);
      v.push_back(grouped(a));
    }
    v.push_back(spec<GeluForward>("gelu_forward"));
    v.push_back(spec<GeluBackward>("gelu_backward"));
    v.push_back(spec<ReluForward>("relu_forward"));
    v.push_back(named_spec<ActivationBackward>("relu_backward"));
    v.push_back(spec<SiluForward>("silu_forward"));
    v.push_back(named_spec<ActivationBackward>("silu_backward"));
    v.push_back(spec<SwigluForward>("swiglu_forward"));
    v.push_back(spec<SwigluBackward>("swiglu_backward"));
    v.push_back(spec<ResidualForward>("residual_forward"));
    v.push_back(spec<CrossentropyForward>("crossentropy_forward"));
    v.push_back(spec<CrossentropyBackward>("crossentropy_backward"));
    v.push_back(spec<CrossentropyShardStats>("crossentropy_shard_stats"));
    v.push_back(spec<CrossentropyShardCombine>("crossentropy_shard_combine"));
    v.push_back(spec<CrossentropyShardBackward>("crossentropy_shard_backward"));
    v.push_back(spec<AdamUpdate>("adam_update"));
    v.push_back({"sum_squares", "", Dtype::f32, [](const OpShape& s, Memory& m) -> std::unique_ptr<OpCase> {
                   return std::make_unique<Reduction>("sum_squares", s, m);
                 }});
    v.push_back({"sum", "", Dtype::f32, [](const OpShape& s, Memory& m) -> std::unique_ptr<OpCase> {
                   return std::make_unique<Reduction>("sum", s, m);
                 }});
    return v;
  }();
  return table;
}

int64_t gqa_kv_heads(int64_t NH) {
  for (int64_t d = NH / 2; d > 1; --d) {
    if (NH % d == 0) return d;
  }
  return 1;
}

const OpSpec& op_spec(const std::string& name) {
  std::string known;
  for (const Dtype d : {Dtype::f32, Dtype::bf16}) {
    for (const OpSpec& s : op_table(d)) {
      if (s.name() == name) return s;
      known += (known.empty() ? "" : ", ") + s.name();
    }
  }
  throw std::invalid_argument(fmt::format("no op '{}' in the op table (known: {})", name, known));
}

}  // namespace gpt2::ops
