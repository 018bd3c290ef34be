#include "kernel_cases.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "buffer.h"
#include "params.h"

namespace gpt2::bench {

namespace {

constexpr double kU = 5.96e-8;  // float unit roundoff, 2^-24

// A float array with its shape: the storage of one kernel argument.
struct Arr {
  Buffer buf;
  std::vector<int64_t> dims;
  Arr() = default;
  explicit Arr(std::vector<int64_t> d) : dims(std::move(d)) {
    size_t n = 1;
    for (int64_t x : dims) n *= static_cast<size_t>(x);
    buf = Buffer(n);
  }
  Tensor t() const {
    Tensor v;
    v.data = buf.data();
    v.ndim = static_cast<int>(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) v.shape[i] = dims[i];
    return v;
  }
  float* data() const { return buf.data(); }
  size_t size() const { return buf.size(); }
};

// splitmix64: a fast seeded stream, so that filling the larger shape's
// hundred-million-element buffers takes a fraction of a second.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

Arr random(std::vector<int64_t> dims, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Arr a(std::move(dims));
  for (size_t i = 0; i < a.size(); ++i) {
    const double u = static_cast<double>(mix(seed * 0x100000001b3ull + i) >> 11) * 0x1.0p-53;
    a.data()[i] = lo + static_cast<float>(u) * (hi - lo);
  }
  return a;
}

std::vector<int32_t> random_tokens(size_t n, int V, uint64_t seed) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(mix(seed * 0x100000001b3ull + i) % static_cast<uint64_t>(V));
  return v;
}

void copy_into(Arr& dst, const Arr& src) { std::memcpy(dst.data(), src.data(), src.size() * sizeof(float)); }

CostShape cost_shape(const BenchShape& s) {
  CostShape c;
  c.B = s.B;
  c.T = s.cfg.T;
  c.C = s.cfg.C;
  c.NH = s.cfg.NH;
  c.V = s.cfg.V;
  return c;
}

// The shape a check runs at: one batch row for attention (the tiling
// depends on T, NH and HS only).
BenchShape one_row(const BenchShape& s) {
  BenchShape r = s;
  r.B = 1;
  return r;
}

class EncoderForward final : public KernelCase {
 public:
  explicit EncoderForward(const BenchShape& s)
      : s_(s), tok_(random_tokens(static_cast<size_t>(s.N()), s.cfg.V, 1)),
        wte_(random({s.cfg.V, s.cfg.C}, 2)), wpe_(random({s.cfg.T, s.cfg.C}, 3)), out_({s.B, s.cfg.T, s.cfg.C}) {}
  void reset() override {}
  void run(Backend& be) override { be.encoder_forward(out_.t(), tok_.data(), wte_.t(), wpe_.t()); }
  std::vector<CheckedOutput> outputs() override { return {{"out", out_.data(), out_.size(), {0, 0}}}; }
  KernelCost cost() const override { return kernel_cost("encoder_forward", cost_shape(s_)); }

 private:
  BenchShape s_;
  std::vector<int32_t> tok_;
  Arr wte_, wpe_, out_;
};

class EncoderBackward final : public KernelCase {
 public:
  explicit EncoderBackward(const BenchShape& s)
      : s_(s), tok_(random_tokens(static_cast<size_t>(s.N()), s.cfg.V, 1)), dout_(random({s.B, s.cfg.T, s.cfg.C}, 4)),
        dwte0_(random({s.cfg.V, s.cfg.C}, 5)), dwpe0_(random({s.cfg.T, s.cfg.C}, 6)), dwte_(dwte0_.dims),
        dwpe_(dwpe0_.dims) {}
  void reset() override {
    copy_into(dwte_, dwte0_);
    copy_into(dwpe_, dwpe0_);
  }
  void run(Backend& be) override { be.encoder_backward(dwte_.t(), dwpe_.t(), dout_.t(), tok_.data()); }
  // Each element sums its rows in the same order on every backend: identical.
  std::vector<CheckedOutput> outputs() override {
    return {{"dwte", dwte_.data(), dwte_.size(), {0, 0}}, {"dwpe", dwpe_.data(), dwpe_.size(), {0, 0}}};
  }
  KernelCost cost() const override { return kernel_cost("encoder_backward", cost_shape(s_)); }

 private:
  BenchShape s_;
  std::vector<int32_t> tok_;
  Arr dout_, dwte0_, dwpe0_, dwte_, dwpe_;
};

class LayernormForward final : public KernelCase {
 public:
  explicit LayernormForward(const BenchShape& s)
      : s_(s), x_(random({s.N(), s.cfg.C}, 11, -2.0f, 3.0f)), w_(random({s.cfg.C}, 12)), b_(random({s.cfg.C}, 13)),
        out_(x_.dims), mean_({s.N()}), rstd_({s.N()}) {}
  void reset() override {}
  void run(Backend& be) override { be.layernorm_forward(out_.t(), mean_.t(), rstd_.t(), x_.t(), w_.t(), b_.t()); }
  // Mean and variance sum C terms of size <= 3 (resp. 9).
  std::vector<CheckedOutput> outputs() override {
    const double tol = 4.0 * s_.cfg.C * kU * 9;
    return {{"mean", mean_.data(), mean_.size(), {tol, 0}},
            {"rstd", rstd_.data(), rstd_.size(), {tol, tol}},
            {"out", out_.data(), out_.size(), {tol * 4, tol}}};
  }
  KernelCost cost() const override { return kernel_cost("layernorm_forward", cost_shape(s_)); }

 private:
  BenchShape s_;
  Arr x_, w_, b_, out_, mean_, rstd_;
};

class LayernormBackward final : public KernelCase {
 public:
  explicit LayernormBackward(const BenchShape& s)
      : s_(s), x_(random({s.N(), s.cfg.C}, 11, -2.0f, 3.0f)), w_(random({s.cfg.C}, 12)), b_(random({s.cfg.C}, 13)),
        mean_({s.N()}), rstd_({s.N()}), dout_(random(x_.dims, 14)), dx0_(random(x_.dims, 15)),
        dw0_(random(w_.dims, 16)), db0_(random(b_.dims, 17)), dx_(x_.dims), dw_(w_.dims), db_(b_.dims) {
    Arr out(x_.dims);  // the forward's statistics, from the reference
    make_reference_backend()->layernorm_forward(out.t(), mean_.t(), rstd_.t(), x_.t(), w_.t(), b_.t());
  }
  void reset() override {
    copy_into(dx_, dx0_);
    copy_into(dw_, dw0_);
    copy_into(db_, db0_);
  }
  void run(Backend& be) override {
    be.layernorm_backward(dx_.t(), dw_.t(), db_.t(), dout_.t(), x_.t(), w_.t(), mean_.t(), rstd_.t());
  }
  // dinp: sums over C terms; dweight, dbias: sums over N rows of terms <= ~2.
  std::vector<CheckedOutput> outputs() override {
    const double N = s_.N(), C = s_.cfg.C;
    return {{"dinp", dx_.data(), dx_.size(), {4 * C * kU * 8, 1e-5}},
            {"dweight", dw_.data(), dw_.size(), {4 * N * kU * 2, 0}},
            {"dbias", db_.data(), db_.size(), {4 * N * kU, 0}}};
  }
  KernelCost cost() const override { return kernel_cost("layernorm_backward", cost_shape(s_)); }

 private:
  BenchShape s_;
  Arr x_, w_, b_, mean_, rstd_, dout_, dx0_, dw0_, db0_, dx_, dw_, db_;
};

// One of the model's linear layers: (N, C) -> (N, OC), with or without bias.
struct Linear {
  int64_t C, OC;
  bool bias;
};

Linear linear_of(const std::string& layer, const Gpt2Config& cfg) {
  const int64_t C = cfg.C;
  if (layer == "qkv") return {C, 3 * C, false};
  if (layer == "fc") return {C, 4 * C, true};
  if (layer == "fcproj") return {4 * C, C, true};
  return {C, cfg.V, false};  // lm_head
}

// A matmul's cost at N rows: (N, C) -> (N, OC).
KernelCost matmul_cost(const std::string& kernel, const Linear& l, int64_t N) {
  CostShape c;
  c.B = 1, c.T = N, c.C = l.C, c.OC = l.OC;
  return kernel_cost(kernel, c);
}

// Matmul's tolerance over K-term products of U(-1,1) inputs (see the header).
double gemm_atol(double K) { return 2 * (K + 1) * kU * K / 2; }

class MatmulForward final : public KernelCase {
 public:
  MatmulForward(const Linear& l, int64_t N)
      : l_(l), N_(N), x_(random({N, l.C}, 21)), w_(random({l.OC, l.C}, 22)),
        b_(l.bias ? random({l.OC}, 23) : Arr()), out_({N, l.OC}) {}
  void reset() override {}
  void run(Backend& be) override { be.matmul_forward(out_.t(), x_.t(), w_.t(), l_.bias ? b_.t() : Tensor{}); }
  std::vector<CheckedOutput> outputs() override {
    return {{"out", out_.data(), out_.size(), {gemm_atol(static_cast<double>(l_.C) + 1), 0}}};
  }
  KernelCost cost() const override { return matmul_cost("matmul_forward", l_, N_); }

 private:
  Linear l_;
  int64_t N_;
  Arr x_, w_, b_, out_;
};

class MatmulBackward final : public KernelCase {
 public:
  MatmulBackward(const Linear& l, int64_t N)
      : l_(l), N_(N), x_(random({N, l.C}, 21)), w_(random({l.OC, l.C}, 22)), dout_(random({N, l.OC}, 24)),
        dw0_(random(w_.dims, 25)), db0_(l.bias ? random({l.OC}, 26) : Arr()), dx_(x_.dims), dw_(w_.dims),
        db_(l.bias ? Arr({l.OC}) : Arr()) {}
  void reset() override {
    copy_into(dw_, dw0_);
    if (l_.bias) copy_into(db_, db0_);
  }
  void run(Backend& be) override {
    be.matmul_backward(dx_.t(), dw_.t(), l_.bias ? db_.t() : Tensor{}, dout_.t(), x_.t(), w_.t());
  }
  // dinp sums OC products, dweight sums N products (plus its U(-1,1) start).
  std::vector<CheckedOutput> outputs() override {
    std::vector<CheckedOutput> o = {{"dinp", dx_.data(), dx_.size(), {gemm_atol(static_cast<double>(l_.OC)), 0}},
                                    {"dweight", dw_.data(), dw_.size(), {gemm_atol(static_cast<double>(N_)) + 4 * kU, 0}}};
    if (l_.bias) o.push_back({"dbias", db_.data(), db_.size(), {4.0 * static_cast<double>(N_) * kU, 4 * kU}});
    return o;
  }
  KernelCost cost() const override { return matmul_cost("matmul_backward", l_, N_); }

 private:
  Linear l_;
  int64_t N_;
  Arr x_, w_, dout_, dw0_, db0_, dx_, dw_, db_;
};

// Scores are HS-term dots of inputs U(-2,2) (terms <= 4); outputs are convex
// combinations of |v| <= 2 over up to T keys, with fast_exp's 2 ulp per weight.
double score_tol(const BenchShape& s) { return 4.0 * s.cfg.head_size() * kU * 4; }

class AttentionForward final : public KernelCase {
 public:
  explicit AttentionForward(const BenchShape& s)
      : s_(s), qkv_(random({s.B, s.cfg.T, 3 * s.cfg.C}, 31, -2.0f, 2.0f)), out_({s.B, s.cfg.T, s.cfg.C}),
        lse_({s.B, s.cfg.NH, s.cfg.T}) {}
  void reset() override {}
  void run(Backend& be) override { be.attention_forward(out_.t(), lse_.t(), qkv_.t(), s_.cfg.NH); }
  std::vector<CheckedOutput> outputs() override {
    const double st = score_tol(s_);
    return {{"lse", lse_.data(), lse_.size(), {2 * st, 1e-6}},
            {"out", out_.data(), out_.size(), {4.0 * s_.cfg.T * kU * 2 + 2 * st, 1e-5}}};
  }
  KernelCost cost() const override { return kernel_cost("attention_forward", cost_shape(s_)); }

 private:
  BenchShape s_;
  Arr qkv_, out_, lse_;
};

class AttentionBackward final : public KernelCase {
 public:
  explicit AttentionBackward(const BenchShape& s)
      : s_(s), qkv_(random({s.B, s.cfg.T, 3 * s.cfg.C}, 31, -2.0f, 2.0f)), out_({s.B, s.cfg.T, s.cfg.C}),
        lse_({s.B, s.cfg.NH, s.cfg.T}), dout_(random(out_.dims, 32)), dqkv_(qkv_.dims) {
    make_reference_backend()->attention_forward(out_.t(), lse_.t(), qkv_.t(), s.cfg.NH);
  }
  // '=' semantics: stale values must vanish.
  void reset() override { std::fill(dqkv_.data(), dqkv_.data() + dqkv_.size(), 7.0f); }
  void run(Backend& be) override {
    be.attention_backward(dqkv_.t(), dout_.t(), out_.t(), lse_.t(), qkv_.t(), s_.cfg.NH);
  }
  // Sums of T terms, each a product of HS-term dots (size <= 8) and inputs <= 2.
  std::vector<CheckedOutput> outputs() override {
    return {{"dqkv", dqkv_.data(), dqkv_.size(), {4.0 * s_.cfg.T * s_.cfg.head_size() * kU * 16, 1e-4}}};
  }
  KernelCost cost() const override { return kernel_cost("attention_backward", cost_shape(s_)); }

 private:
  BenchShape s_;
  Arr qkv_, out_, lse_, dout_, dqkv_;
};

class GeluForward final : public KernelCase {
 public:
  explicit GeluForward(const BenchShape& s) : s_(s), x_(random({s.N(), 4 * s.cfg.C}, 41, -6.0f, 6.0f)), out_(x_.dims) {}
  void reset() override {}
  void run(Backend& be) override { be.gelu_forward(out_.t(), x_.t()); }
  // fast_tanh's 3e-7 absolute error, times 0.5|x| <= 3.
  std::vector<CheckedOutput> outputs() override { return {{"out", out_.data(), out_.size(), {1e-6, 4 * kU}}}; }
  KernelCost cost() const override { return kernel_cost("gelu_forward", cost_shape(s_)); }

 private:
  BenchShape s_;
  Arr x_, out_;
};

class GeluBackward final : public KernelCase {
 public:
  explicit GeluBackward(const BenchShape& s)
      : s_(s), x_(random({s.N(), 4 * s.cfg.C}, 41, -6.0f, 6.0f)), dout_(random(x_.dims, 42)), dx_(x_.dims) {}
  void reset() override {}
  void run(Backend& be) override { be.gelu_backward(dx_.t(), dout_.t(), x_.t()); }
  std::vector<CheckedOutput> outputs() override { return {{"dinp", dx_.data(), dx_.size(), {4e-6, 8 * kU}}}; }
  KernelCost cost() const override { return kernel_cost("gelu_backward", cost_shape(s_)); }

 private:
  BenchShape s_;
  Arr x_, dout_, dx_;
};

class ResidualForward final : public KernelCase {
 public:
  explicit ResidualForward(const BenchShape& s)
      : s_(s), a_(random({s.N(), s.cfg.C}, 51)), b_(random(a_.dims, 52)), out_(a_.dims) {}
  void reset() override {}
  void run(Backend& be) override { be.residual_forward(out_.t(), a_.t(), b_.t()); }
  std::vector<CheckedOutput> outputs() override { return {{"out", out_.data(), out_.size(), {0, 0}}}; }
  KernelCost cost() const override { return kernel_cost("residual_forward", cost_shape(s_)); }

 private:
  BenchShape s_;
  Arr a_, b_, out_;
};

class CrossentropyForward final : public KernelCase {
 public:
  explicit CrossentropyForward(const BenchShape& s)
      : s_(s), z_(random({s.N(), s.cfg.V}, 61, -5.0f, 5.0f)),
        tgt_(random_tokens(static_cast<size_t>(s.N()), s.cfg.V, 62)), loss_({s.N()}) {}
  void reset() override {}
  void run(Backend& be) override { be.crossentropy_forward(loss_.t(), z_.t(), tgt_.data()); }
  // The log of a V-term sum with fast_exp's 2 ulp per term; terms of size <= 10.
  std::vector<CheckedOutput> outputs() override {
    return {{"losses", loss_.data(), loss_.size(), {4.0 * s_.cfg.V * kU * 10, 0}}};
  }
  KernelCost cost() const override { return kernel_cost("crossentropy_forward", cost_shape(s_)); }

 private:
  BenchShape s_;
  Arr z_;
  std::vector<int32_t> tgt_;
  Arr loss_;
};

class CrossentropyBackward final : public KernelCase {
 public:
  explicit CrossentropyBackward(const BenchShape& s)
      : s_(s), z_(random({s.N(), s.cfg.V}, 61, -5.0f, 5.0f)),
        tgt_(random_tokens(static_cast<size_t>(s.N()), s.cfg.V, 62)), dz_(z_.dims) {}
  void reset() override {}
  void run(Backend& be) override { be.crossentropy_backward(dz_.t(), z_.t(), tgt_.data(), dloss()); }
  std::vector<CheckedOutput> outputs() override {
    return {{"dlogits", dz_.data(), dz_.size(), {dloss() * 4.0 * s_.cfg.V * kU, 8 * kU}}};
  }
  KernelCost cost() const override { return kernel_cost("crossentropy_backward", cost_shape(s_)); }

 private:
  float dloss() const { return 1.0f / static_cast<float>(s_.N()); }
  BenchShape s_;
  Arr z_;
  std::vector<int32_t> tgt_;
  Arr dz_;
};

// The flat parameter buffer of the shape's model: what the optimizer and the
// gradient norm run over once per step.
int64_t flat_params(const BenchShape& s) { return static_cast<int64_t>(param_count(s.cfg)); }

class AdamUpdate final : public KernelCase {
 public:
  explicit AdamUpdate(const BenchShape& s)
      : P_(flat_params(s)), p0_(random({P_}, 71)), g_(random({P_}, 72)), m0_(random({P_}, 73)),
        v0_(random({P_}, 74, 0.0f, 1.0f)), p_({P_}), m_({P_}), v_({P_}) {}
  void reset() override {
    copy_into(p_, p0_);
    copy_into(m_, m0_);
    copy_into(v_, v0_);
  }
  void run(Backend& be) override { be.adam_update(p_.t(), g_.t(), m_.t(), v_.t(), kCoefficients); }
  std::vector<CheckedOutput> outputs() override {
    return {{"m", m_.data(), m_.size(), {0, 2 * kU}},
            {"v", v_.data(), v_.size(), {0, 2 * kU}},
            {"param", p_.data(), p_.size(), {1e-3 * 8 * kU, 2 * kU}}};
  }
  KernelCost cost() const override {
    CostShape c;
    c.P = P_;
    return kernel_cost("adam_update", c);
  }

 private:
  static constexpr AdamCoefficients kCoefficients{0.9f, 0.95f, 1e-8f, 1e-3f, 1.3f, 0.999f, 0.7f};
  int64_t P_;
  Arr p0_, g_, m0_, v0_, p_, m_, v_;
};

class SumSquares final : public KernelCase {
 public:
  explicit SumSquares(const BenchShape& s) : P_(flat_params(s)), g_(random({P_}, 72)), result_({1}) {}
  void reset() override {}
  void run(Backend& be) override { result_.data()[0] = static_cast<float>(be.sum_squares(g_.t())); }
  // Both accumulate in double; compared after rounding to float.
  std::vector<CheckedOutput> outputs() override { return {{"sum", result_.data(), 1, {0, 2 * kU}}}; }
  KernelCost cost() const override {
    CostShape c;
    c.P = P_;
    return kernel_cost("sum_squares", c);
  }

 private:
  int64_t P_;
  Arr g_, result_;
};

template <typename Case>
KernelSpec simple(const std::string& kernel, bool heavy = false, bool check_one_row = false) {
  return {kernel, "",
          [check_one_row](const BenchShape& s, bool for_check) -> std::unique_ptr<KernelCase> {
            return std::make_unique<Case>(for_check && check_one_row ? one_row(s) : s);
          },
          heavy};
}

template <typename Case>
KernelSpec matmul(const std::string& kernel, const std::string& layer) {
  return {kernel, layer,
          [layer](const BenchShape& s, bool for_check) -> std::unique_ptr<KernelCase> {
            const int64_t N = for_check ? std::min<int64_t>(s.N(), 256) : s.N();
            return std::make_unique<Case>(linear_of(layer, s.cfg), N);
          },
          true};
}

}  // namespace

const std::vector<KernelSpec>& kernel_specs() {
  static const std::vector<KernelSpec> specs = [] {
    std::vector<KernelSpec> v = {simple<EncoderForward>("encoder_forward"),
                                 simple<EncoderBackward>("encoder_backward"),
                                 simple<LayernormForward>("layernorm_forward"),
                                 simple<LayernormBackward>("layernorm_backward")};
    for (const char* layer : {"qkv", "fc", "fcproj", "lm_head"}) {
      v.push_back(matmul<MatmulForward>("matmul_forward", layer));
      v.push_back(matmul<MatmulBackward>("matmul_backward", layer));
    }
    v.push_back(simple<AttentionForward>("attention_forward", true, true));
    v.push_back(simple<AttentionBackward>("attention_backward", true, true));
    v.push_back(simple<GeluForward>("gelu_forward"));
    v.push_back(simple<GeluBackward>("gelu_backward"));
    v.push_back(simple<ResidualForward>("residual_forward"));
    v.push_back(simple<CrossentropyForward>("crossentropy_forward"));
    v.push_back(simple<CrossentropyBackward>("crossentropy_backward"));
    v.push_back(simple<AdamUpdate>("adam_update"));
    v.push_back(simple<SumSquares>("sum_squares"));
    return v;
  }();
  return specs;
}

namespace {

// The reference's outputs for the last (kernel, shape) checked: every
// variant of one kernel and shape is checked against one reference run.
struct ReferenceCache {
  std::string key;
  std::vector<std::vector<float>> outputs;
};

std::string compare(const std::string& what, const CheckedOutput& actual, const std::vector<float>& expected) {
  size_t worst = 0;
  double worst_excess = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < actual.n; ++i) {
    const double a = actual.data[i], e = expected[i];
    const double excess = std::isfinite(a) ? std::fabs(a - e) - (actual.tol.atol + actual.tol.rtol * std::fabs(e))
                                           : std::numeric_limits<double>::infinity();
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (worst_excess <= 0) return "";
  const double a = actual.data[worst], e = expected[worst];
  return fmt::format("{} differs from the naive reference: {} index {} of {}: expected {:.9g}, actual {:.9g}, "
                     "|diff| {:.3g} > tolerance {:.3g}",
                     what, actual.name, worst, actual.n, e, a, std::fabs(a - e),
                     actual.tol.atol + actual.tol.rtol * std::fabs(e));
}

}  // namespace

std::string check_against_reference(const KernelSpec& spec, const BenchShape& shape, Backend& variant,
                                    bool corrupt) {
  static ReferenceCache cache;
  auto kc = spec.make(shape, true);
  const std::string key = spec.name() + "/" + shape.name;
  if (cache.key != key) {
    cache.key.clear();
    cache.outputs.clear();
    kc->reset();
    kc->run(*make_reference_backend());
    for (const CheckedOutput& o : kc->outputs()) cache.outputs.emplace_back(o.data, o.data + o.n);
    cache.key = key;
  }
  kc->reset();
  kc->run(variant);
  const std::vector<CheckedOutput> outs = kc->outputs();
  if (corrupt) outs.front().data[0] += 1.0f;
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string err = compare(spec.name(), outs[i], cache.outputs[i]);
    if (!err.empty()) return err;
  }
  return "";
}

}  // namespace gpt2::bench
