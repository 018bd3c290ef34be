#include "kernel_cases.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/buffer.h"
#include "model/params.h"

namespace gpt2::bench {

namespace {

constexpr double kU = 5.96e-8;  // float unit roundoff, 2^-24

size_t count(const std::vector<int64_t>& dims) {
  size_t n = 1;
  for (int64_t x : dims) n *= static_cast<size_t>(x);
  return n;
}

// A float array with its shape, in one memory: the storage of one kernel
// argument.
struct Arr {
  Buffer buf;
  std::vector<int64_t> dims;
  Arr() = default;
  Arr(std::vector<int64_t> d, Memory& m) : buf(count(d), m), dims(std::move(d)) {}
  Tensor t() const {
    Tensor v;
    v.data = buf.data();
    v.ndim = static_cast<int>(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) v.shape[i] = dims[i];
    return v;
  }
  size_t size() const { return buf.size(); }
  std::vector<float> host() const { return buf.download(); }
};

// A copy of `a` in memory `m` (set-up only: host <-> device through the host).
Arr copy_to(const Arr& a, Memory& m) {
  Arr r(a.dims, m);
  r.buf.upload(a.host());
  return r;
}

// splitmix64: a fast seeded stream, so that filling the larger shape's
// hundred-million-element buffers takes a fraction of a second.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::vector<float> random_values(size_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(mix(seed * 0x100000001b3ull + i) >> 11) * 0x1.0p-53;
    v[i] = lo + static_cast<float>(u) * (hi - lo);
  }
  return v;
}

// U(lo, hi) values drawn on the host and uploaded to `m`.
Arr random(std::vector<int64_t> dims, uint64_t seed, Memory& m, float lo = -1.0f, float hi = 1.0f) {
  Arr a(std::move(dims), m);
  a.buf.upload(random_values(a.size(), seed, lo, hi));
  return a;
}

// An array the kernel updates in place (+=, or an optimizer's state): its
// starting values stay on the host and reset() uploads them again, so every
// run starts from the same state (a memcpy when `m` is the host's).
struct InPlace {
  std::vector<float> start;
  Arr arr;
  InPlace() = default;
  InPlace(std::vector<int64_t> dims, std::vector<float> values, Memory& m) : start(std::move(values)), arr(std::move(dims), m) {
    reset();
  }
  void reset() { arr.buf.upload(start); }
  Tensor t() const { return arr.t(); }
};

InPlace random_in_place(std::vector<int64_t> dims, uint64_t seed, Memory& m, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v = random_values(count(dims), seed, lo, hi);
  return InPlace(std::move(dims), std::move(v), m);
}

std::vector<int32_t> random_tokens(size_t n, int V, uint64_t seed) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(mix(seed * 0x100000001b3ull + i) % static_cast<uint64_t>(V));
  return v;
}

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
  EncoderForward(const BenchShape& s, Memory& m)
      : s_(s), tok_(random_tokens(static_cast<size_t>(s.N()), s.cfg.V, 1)),
        wte_(random({s.cfg.V, s.cfg.C}, 2, m)), wpe_(random({s.cfg.T, s.cfg.C}, 3, m)), out_({s.B, s.cfg.T, s.cfg.C}, m) {}
  void reset() override {}
  void run(Backend& be) override { be.encoder_forward(out_.t(), tok_.data(), wte_.t(), wpe_.t()); }
  std::vector<CheckedOutput> outputs() override { return {{"out", out_.host(), {0, 0}}}; }
  KernelCost cost() const override { return kernel_cost("encoder_forward", cost_shape(s_)); }

 private:
  BenchShape s_;
  std::vector<int32_t> tok_;
  Arr wte_, wpe_, out_;
};

class EncoderBackward final : public KernelCase {
 public:
  EncoderBackward(const BenchShape& s, Memory& m)
      : s_(s), tok_(random_tokens(static_cast<size_t>(s.N()), s.cfg.V, 1)), dout_(random({s.B, s.cfg.T, s.cfg.C}, 4, m)),
        dwte_(random_in_place({s.cfg.V, s.cfg.C}, 5, m)), dwpe_(random_in_place({s.cfg.T, s.cfg.C}, 6, m)) {}
  void reset() override {
    dwte_.reset();
    dwpe_.reset();
  }
  void run(Backend& be) override { be.encoder_backward(dwte_.t(), dwpe_.t(), dout_.t(), tok_.data()); }
  // Each element sums its rows in the same order on every backend (the CUDA
  // one too: a sorted pass, no atomics): identical.
  std::vector<CheckedOutput> outputs() override {
    return {{"dwte", dwte_.arr.host(), {0, 0}}, {"dwpe", dwpe_.arr.host(), {0, 0}}};
  }
  KernelCost cost() const override { return kernel_cost("encoder_backward", cost_shape(s_)); }

 private:
  BenchShape s_;
  std::vector<int32_t> tok_;
  Arr dout_;
  InPlace dwte_, dwpe_;
};

class LayernormForward final : public KernelCase {
 public:
  LayernormForward(const BenchShape& s, Memory& m)
      : s_(s), x_(random({s.N(), s.cfg.C}, 11, m, -2.0f, 3.0f)), w_(random({s.cfg.C}, 12, m)),
        b_(random({s.cfg.C}, 13, m)), out_(x_.dims, m), mean_({s.N()}, m), rstd_({s.N()}, m) {}
  void reset() override {}
  void run(Backend& be) override { be.layernorm_forward(out_.t(), mean_.t(), rstd_.t(), x_.t(), w_.t(), b_.t()); }
  // Mean and variance sum C terms of size <= 3 (resp. 9).
  std::vector<CheckedOutput> outputs() override {
    const double tol = 4.0 * s_.cfg.C * kU * 9;
    return {{"mean", mean_.host(), {tol, 0}}, {"rstd", rstd_.host(), {tol, tol}}, {"out", out_.host(), {tol * 4, tol}}};
  }
  KernelCost cost() const override { return kernel_cost("layernorm_forward", cost_shape(s_)); }

 private:
  BenchShape s_;
  Arr x_, w_, b_, out_, mean_, rstd_;
};

class LayernormBackward final : public KernelCase {
 public:
  LayernormBackward(const BenchShape& s, Memory& m)
      : s_(s), x_(random({s.N(), s.cfg.C}, 11, m, -2.0f, 3.0f)), w_(random({s.cfg.C}, 12, m)),
        b_(random({s.cfg.C}, 13, m)), dout_(random(x_.dims, 14, m)), dx_(random_in_place(x_.dims, 15, m)),
        dw_(random_in_place(w_.dims, 16, m)), db_(random_in_place(b_.dims, 17, m)) {
    // The forward's statistics, from the reference on host copies.
    Memory& h = host_memory();
    const Arr x = copy_to(x_, h), w = copy_to(w_, h), b = copy_to(b_, h);
    Arr out(x.dims, h), mean({s.N()}, h), rstd({s.N()}, h);
    make_reference_backend()->layernorm_forward(out.t(), mean.t(), rstd.t(), x.t(), w.t(), b.t());
    mean_ = copy_to(mean, m);
    rstd_ = copy_to(rstd, m);
  }
  void reset() override {
    dx_.reset();
    dw_.reset();
    db_.reset();
  }
  void run(Backend& be) override {
    be.layernorm_backward(dx_.t(), dw_.t(), db_.t(), dout_.t(), x_.t(), w_.t(), mean_.t(), rstd_.t());
  }
  // dinp: sums over C terms; dweight, dbias: sums over N rows of terms <= ~2.
  std::vector<CheckedOutput> outputs() override {
    const double N = s_.N(), C = s_.cfg.C;
    return {{"dinp", dx_.arr.host(), {4 * C * kU * 8, 1e-5}},
            {"dweight", dw_.arr.host(), {4 * N * kU * 2, 0}},
            {"dbias", db_.arr.host(), {4 * N * kU, 0}}};
  }
  KernelCost cost() const override { return kernel_cost("layernorm_backward", cost_shape(s_)); }

 private:
  BenchShape s_;
  Arr x_, w_, b_, dout_, mean_, rstd_;
  InPlace dx_, dw_, db_;
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
  MatmulForward(const Linear& l, int64_t N, Memory& m)
      : l_(l), N_(N), x_(random({N, l.C}, 21, m)), w_(random({l.OC, l.C}, 22, m)),
        b_(l.bias ? random({l.OC}, 23, m) : Arr()), out_({N, l.OC}, m) {}
  void reset() override {}
  void run(Backend& be) override { be.matmul_forward(out_.t(), x_.t(), w_.t(), l_.bias ? b_.t() : Tensor{}); }
  std::vector<CheckedOutput> outputs() override {
    return {{"out", out_.host(), {gemm_atol(static_cast<double>(l_.C) + 1), 0}}};
  }
  KernelCost cost() const override { return matmul_cost("matmul_forward", l_, N_); }

 private:
  Linear l_;
  int64_t N_;
  Arr x_, w_, b_, out_;
};

class MatmulBackward final : public KernelCase {
 public:
  MatmulBackward(const Linear& l, int64_t N, Memory& m)
      : l_(l), N_(N), x_(random({N, l.C}, 21, m)), w_(random({l.OC, l.C}, 22, m)), dout_(random({N, l.OC}, 24, m)),
        dx_(x_.dims, m), dw_(random_in_place(w_.dims, 25, m)), db_(l.bias ? random_in_place({l.OC}, 26, m) : InPlace()) {}
  void reset() override {
    dw_.reset();
    if (l_.bias) db_.reset();
  }
  void run(Backend& be) override {
    be.matmul_backward(dx_.t(), dw_.t(), l_.bias ? db_.t() : Tensor{}, dout_.t(), x_.t(), w_.t());
  }
  // dinp sums OC products, dweight sums N products (plus its U(-1,1) start).
  std::vector<CheckedOutput> outputs() override {
    std::vector<CheckedOutput> o = {{"dinp", dx_.host(), {gemm_atol(static_cast<double>(l_.OC)), 0}},
                                    {"dweight", dw_.arr.host(), {gemm_atol(static_cast<double>(N_)) + 4 * kU, 0}}};
    if (l_.bias) o.push_back({"dbias", db_.arr.host(), {4.0 * static_cast<double>(N_) * kU, 4 * kU}});
    return o;
  }
  KernelCost cost() const override { return matmul_cost("matmul_backward", l_, N_); }

 private:
  Linear l_;
  int64_t N_;
  Arr x_, w_, dout_, dx_;
  InPlace dw_, db_;
};

// Scores are HS-term dots of inputs U(-2,2) (terms <= 4); outputs are convex
// combinations of |v| <= 2 over up to T keys, with fast_exp's 2 ulp per weight.
double score_tol(const BenchShape& s) { return 4.0 * s.cfg.head_size() * kU * 4; }

class AttentionForward final : public KernelCase {
 public:
  AttentionForward(const BenchShape& s, Memory& m)
      : s_(s), qkv_(random({s.B, s.cfg.T, 3 * s.cfg.C}, 31, m, -2.0f, 2.0f)), out_({s.B, s.cfg.T, s.cfg.C}, m),
        lse_({s.B, s.cfg.NH, s.cfg.T}, m) {}
  void reset() override {}
  void run(Backend& be) override { be.attention_forward(out_.t(), lse_.t(), qkv_.t(), s_.cfg.NH); }
  std::vector<CheckedOutput> outputs() override {
    const double st = score_tol(s_);
    return {{"lse", lse_.host(), {2 * st, 1e-6}}, {"out", out_.host(), {4.0 * s_.cfg.T * kU * 2 + 2 * st, 1e-5}}};
  }
  KernelCost cost() const override { return kernel_cost("attention_forward", cost_shape(s_)); }

 private:
  BenchShape s_;
  Arr qkv_, out_, lse_;
};

class AttentionBackward final : public KernelCase {
 public:
  // '=' semantics: dqkv starts at 7 everywhere, so stale values must vanish.
  AttentionBackward(const BenchShape& s, Memory& m)
      : s_(s), qkv_(random({s.B, s.cfg.T, 3 * s.cfg.C}, 31, m, -2.0f, 2.0f)),
        dout_(random({s.B, s.cfg.T, s.cfg.C}, 32, m)),
        dqkv_(qkv_.dims, std::vector<float>(qkv_.size(), 7.0f), m) {
    // The forward's out and lse, from the reference on a host copy.
    Memory& h = host_memory();
    const Arr qkv = copy_to(qkv_, h);
    Arr out(dout_.dims, h), lse({s.B, s.cfg.NH, s.cfg.T}, h);
    make_reference_backend()->attention_forward(out.t(), lse.t(), qkv.t(), s.cfg.NH);
    out_ = copy_to(out, m);
    lse_ = copy_to(lse, m);
  }
  void reset() override { dqkv_.reset(); }
  void run(Backend& be) override {
    be.attention_backward(dqkv_.t(), dout_.t(), out_.t(), lse_.t(), qkv_.t(), s_.cfg.NH);
  }
  // Sums of T terms, each a product of HS-term dots (size <= 8) and inputs <= 2.
  std::vector<CheckedOutput> outputs() override {
    return {{"dqkv", dqkv_.arr.host(), {4.0 * s_.cfg.T * s_.cfg.head_size() * kU * 16, 1e-4}}};
  }
  KernelCost cost() const override { return kernel_cost("attention_backward", cost_shape(s_)); }

 private:
  BenchShape s_;
  Arr qkv_, dout_, out_, lse_;
  InPlace dqkv_;
};

class GeluForward final : public KernelCase {
 public:
  GeluForward(const BenchShape& s, Memory& m) : s_(s), x_(random({s.N(), 4 * s.cfg.C}, 41, m, -6.0f, 6.0f)), out_(x_.dims, m) {}
  void reset() override {}
  void run(Backend& be) override { be.gelu_forward(out_.t(), x_.t()); }
  // fast_tanh's 3e-7 absolute error, times 0.5|x| <= 3.
  std::vector<CheckedOutput> outputs() override { return {{"out", out_.host(), {1e-6, 4 * kU}}}; }
  KernelCost cost() const override { return kernel_cost("gelu_forward", cost_shape(s_)); }

 private:
  BenchShape s_;
  Arr x_, out_;
};

class GeluBackward final : public KernelCase {
 public:
  GeluBackward(const BenchShape& s, Memory& m)
      : s_(s), x_(random({s.N(), 4 * s.cfg.C}, 41, m, -6.0f, 6.0f)), dout_(random(x_.dims, 42, m)), dx_(x_.dims, m) {}
  void reset() override {}
  void run(Backend& be) override { be.gelu_backward(dx_.t(), dout_.t(), x_.t()); }
  std::vector<CheckedOutput> outputs() override { return {{"dinp", dx_.host(), {4e-6, 8 * kU}}}; }
  KernelCost cost() const override { return kernel_cost("gelu_backward", cost_shape(s_)); }

 private:
  BenchShape s_;
  Arr x_, dout_, dx_;
};

class ResidualForward final : public KernelCase {
 public:
  ResidualForward(const BenchShape& s, Memory& m)
      : s_(s), a_(random({s.N(), s.cfg.C}, 51, m)), b_(random(a_.dims, 52, m)), out_(a_.dims, m) {}
  void reset() override {}
  void run(Backend& be) override { be.residual_forward(out_.t(), a_.t(), b_.t()); }
  std::vector<CheckedOutput> outputs() override { return {{"out", out_.host(), {0, 0}}}; }
  KernelCost cost() const override { return kernel_cost("residual_forward", cost_shape(s_)); }

 private:
  BenchShape s_;
  Arr a_, b_, out_;
};

class CrossentropyForward final : public KernelCase {
 public:
  CrossentropyForward(const BenchShape& s, Memory& m)
      : s_(s), z_(random({s.N(), s.cfg.V}, 61, m, -5.0f, 5.0f)),
        tgt_(random_tokens(static_cast<size_t>(s.N()), s.cfg.V, 62)), loss_({s.N()}, m) {}
  void reset() override {}
  void run(Backend& be) override { be.crossentropy_forward(loss_.t(), z_.t(), tgt_.data()); }
  // The log of a V-term sum with fast_exp's 2 ulp per term; terms of size <= 10.
  std::vector<CheckedOutput> outputs() override {
    return {{"losses", loss_.host(), {4.0 * s_.cfg.V * kU * 10, 0}}};
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
  CrossentropyBackward(const BenchShape& s, Memory& m)
      : s_(s), z_(random({s.N(), s.cfg.V}, 61, m, -5.0f, 5.0f)),
        tgt_(random_tokens(static_cast<size_t>(s.N()), s.cfg.V, 62)), dz_(z_.dims, m) {}
  void reset() override {}
  void run(Backend& be) override { be.crossentropy_backward(dz_.t(), z_.t(), tgt_.data(), dloss()); }
  std::vector<CheckedOutput> outputs() override {
    return {{"dlogits", dz_.host(), {dloss() * 4.0 * s_.cfg.V * kU, 8 * kU}}};
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
  AdamUpdate(const BenchShape& s, Memory& m)
      : P_(flat_params(s)), g_(random({P_}, 72, m)), p_(random_in_place({P_}, 71, m)), m_(random_in_place({P_}, 73, m)),
        v_(random_in_place({P_}, 74, m, 0.0f, 1.0f)) {}
  void reset() override {
    p_.reset();
    m_.reset();
    v_.reset();
  }
  void run(Backend& be) override { be.adam_update(p_.t(), g_.t(), m_.t(), v_.t(), kCoefficients); }
  std::vector<CheckedOutput> outputs() override {
    return {{"m", m_.arr.host(), {0, 2 * kU}}, {"v", v_.arr.host(), {0, 2 * kU}}, {"param", p_.arr.host(), {1e-3 * 8 * kU, 2 * kU}}};
  }
  KernelCost cost() const override {
    CostShape c;
    c.P = P_;
    return kernel_cost("adam_update", c);
  }

 private:
  static constexpr AdamCoefficients kCoefficients{0.9f, 0.95f, 1e-8f, 1e-3f, 1.3f, 0.999f, 0.7f};
  int64_t P_;
  Arr g_;
  InPlace p_, m_, v_;
};

class SumSquares final : public KernelCase {
 public:
  SumSquares(const BenchShape& s, Memory& m) : P_(flat_params(s)), g_(random({P_}, 72, m)) {}
  void reset() override {}
  void run(Backend& be) override { result_ = static_cast<float>(be.sum_squares(g_.t())); }
  // Both accumulate in double; compared after rounding to float.
  std::vector<CheckedOutput> outputs() override { return {{"sum", {result_}, {0, 2 * kU}}}; }
  KernelCost cost() const override {
    CostShape c;
    c.P = P_;
    return kernel_cost("sum_squares", c);
  }

 private:
  int64_t P_;
  Arr g_;
  float result_ = 0;
};

template <typename Case>
KernelSpec simple(const std::string& kernel, bool heavy = false, bool check_one_row = false) {
  return {kernel, "",
          [check_one_row](const BenchShape& s, bool for_check, Memory& m) -> std::unique_ptr<KernelCase> {
            return std::make_unique<Case>(for_check && check_one_row ? one_row(s) : s, m);
          },
          heavy};
}

template <typename Case>
KernelSpec matmul(const std::string& kernel, const std::string& layer) {
  return {kernel, layer,
          [layer](const BenchShape& s, bool for_check, Memory& m) -> std::unique_ptr<KernelCase> {
            const int64_t N = for_check ? std::min<int64_t>(s.N(), 256) : s.N();
            return std::make_unique<Case>(linear_of(layer, s.cfg), N, m);
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

// A GPU variant's last few operations round differently again: FMA
// contraction and the device's expf / tanhf / rsqrtf (within 2 ulp) change
// each by a few ulp of operands no larger than the output's largest element.
// Its tolerance therefore gains rtol 4u and atol 4u max|expected| over the
// host derivation (tests/cuda_kernels_test.cpp holds the kernels themselves
// to fixed tolerances of the same size). Sums keep their K u bounds, which
// hold in any order.
Tolerance device_tolerance(Tolerance t, const std::vector<float>& expected) {
  double scale = 0;
  for (float e : expected) scale = std::max(scale, static_cast<double>(std::fabs(e)));
  return {t.atol + 4 * kU * scale, t.rtol + 4 * kU};
}

std::string compare(const std::string& what, const CheckedOutput& actual, const std::vector<float>& expected) {
  const std::vector<float>& got = actual.values;
  size_t worst = 0;
  double worst_excess = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = got[i], e = expected[i];
    const double excess = std::isfinite(a) ? std::fabs(a - e) - (actual.tol.atol + actual.tol.rtol * std::fabs(e))
                                           : std::numeric_limits<double>::infinity();
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (worst_excess <= 0) return "";
  const double a = got[worst], e = expected[worst];
  return fmt::format("{} differs from the naive reference: {} index {} of {}: expected {:.9g}, actual {:.9g}, "
                     "|diff| {:.3g} > tolerance {:.3g}",
                     what, actual.name, worst, got.size(), e, a, std::fabs(a - e),
                     actual.tol.atol + actual.tol.rtol * std::fabs(e));
}

}  // namespace

std::string check_against_reference(const KernelSpec& spec, const BenchShape& shape, Backend& variant,
                                    bool corrupt) {
  static ReferenceCache cache;
  const std::string key = spec.name() + "/" + shape.name;
  if (cache.key != key) {
    cache.key.clear();
    cache.outputs.clear();
    auto ref = spec.make(shape, true, host_memory());
    ref->reset();
    ref->run(*make_reference_backend());
    for (CheckedOutput& o : ref->outputs()) cache.outputs.push_back(std::move(o.values));
    cache.key = key;
  }
  auto kc = spec.make(shape, true, variant.memory());
  kc->reset();
  kc->run(variant);
  variant.synchronize();
  std::vector<CheckedOutput> outs = kc->outputs();
  if (corrupt) outs.front().values[0] += 1.0f;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!variant.memory().is_host()) outs[i].tol = device_tolerance(outs[i].tol, cache.outputs[i]);
    const std::string err = compare(spec.name(), outs[i], cache.outputs[i]);
    if (!err.empty()) return err;
  }
  return "";
}

}  // namespace gpt2::bench
