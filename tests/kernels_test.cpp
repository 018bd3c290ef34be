// Every kernel of the optimised CPU backend against the naive reference, on
// fresh random inputs, at two shapes (odd sizes catch vector-tail bugs) and
// with 1 and 2 threads.
//
// Tolerances. Both sides compute in float (unit roundoff u = 6e-8). Where
// the two sum in a different order, each result carries a rounding error of
// up to ~K*u times the sum of |terms| (K terms), so a reduction over K terms
// gets atol = 4*K*u*scale, scale being the size of its terms here (inputs are
// U(-1,1), hence sums of |terms| are at most K). Kernels that use fast_exp /
// fast_tanh (attention, cross-entropy, GELU) add their few-ulp error.
// Matmul uses the classical bound per element: |err| <= 2*K*u*(|A||B|)_ij.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kernels/reference/reference_kernels.h"
#include "test_util.h"

namespace gpt2 {
namespace {

using testing::all_close;
using testing::random_tokens;
using testing::random_vec;

constexpr double kU = 5.96e-8;  // float unit roundoff, 2^-24

struct Shape {
  int B, T, C, NH, V;
};

class KernelTest : public ::testing::TestWithParam<std::tuple<Shape, int>> {
 protected:
  void SetUp() override {
    s = std::get<0>(GetParam());
    cpu = make_cpu_backend(std::get<1>(GetParam()));
    ref = make_reference_backend();
  }
  Shape s{};
  std::unique_ptr<Backend> cpu, ref;
};

Tensor view(std::vector<float>& v, std::initializer_list<int64_t> dims) { return Tensor(v.data(), dims); }

TEST_P(KernelTest, Encoder) {
  const int B = s.B, T = s.T, C = s.C, V = s.V;
  auto tok = random_tokens(static_cast<size_t>(B * T), V, 1);
  auto wte = random_vec(static_cast<size_t>(V * C), 2), wpe = random_vec(static_cast<size_t>(T * C), 3);
  std::vector<float> o1(static_cast<size_t>(B * T * C)), o2(o1.size());
  cpu->encoder_forward(view(o1, {B, T, C}), tok.data(), view(wte, {V, C}), view(wpe, {T, C}));
  ref->encoder_forward(view(o2, {B, T, C}), tok.data(), view(wte, {V, C}), view(wpe, {T, C}));
  EXPECT_TRUE(all_close("encoder out", o1, o2, 0, 0));  // one add each: identical

  auto dout = random_vec(o1.size(), 4);
  auto dwte1 = random_vec(wte.size(), 5), dwpe1 = random_vec(wpe.size(), 6);
  auto dwte2 = dwte1, dwpe2 = dwpe1;  // nonzero start: checks += semantics
  cpu->encoder_backward(view(dwte1, {V, C}), view(dwpe1, {T, C}), view(dout, {B, T, C}), tok.data());
  ref->encoder_backward(view(dwte2, {V, C}), view(dwpe2, {T, C}), view(dout, {B, T, C}), tok.data());
  EXPECT_TRUE(all_close("dwte", dwte1, dwte2, 0, 0));  // same summation order per element
  EXPECT_TRUE(all_close("dwpe", dwpe1, dwpe2, 0, 0));
}

TEST_P(KernelTest, LayerNorm) {
  const int N = s.B * s.T, C = s.C;
  auto x = random_vec(static_cast<size_t>(N * C), 11, -2.0f, 3.0f);
  auto w = random_vec(static_cast<size_t>(C), 12), b = random_vec(static_cast<size_t>(C), 13);
  std::vector<float> o1(x.size()), o2(x.size()), m1(N), m2(N), r1(N), r2(N);
  cpu->layernorm_forward(view(o1, {N, C}), view(m1, {N}), view(r1, {N}), view(x, {N, C}), view(w, {C}),
                         view(b, {C}));
  ref->layernorm_forward(view(o2, {N, C}), view(m2, {N}), view(r2, {N}), view(x, {N, C}), view(w, {C}),
                         view(b, {C}));
  // Mean and variance are sums over C terms of size <= 3 (resp. 9).
  const double tol = 4 * C * kU * 9;
  EXPECT_TRUE(all_close("ln mean", m1, m2, tol, 0));
  EXPECT_TRUE(all_close("ln rstd", r1, r2, tol, tol));
  EXPECT_TRUE(all_close("ln out", o1, o2, tol * 4, tol));

  auto dout = random_vec(x.size(), 14);
  auto dx1 = random_vec(x.size(), 15), dw1 = random_vec(w.size(), 16), db1 = random_vec(b.size(), 17);
  auto dx2 = dx1, dw2 = dw1, db2 = db1;
  cpu->layernorm_backward(view(dx1, {N, C}), view(dw1, {C}), view(db1, {C}), view(dout, {N, C}),
                          view(x, {N, C}), view(w, {C}), view(m2, {N}), view(r2, {N}));
  ref->layernorm_backward(view(dx2, {N, C}), view(dw2, {C}), view(db2, {C}), view(dout, {N, C}),
                          view(x, {N, C}), view(w, {C}), view(m2, {N}), view(r2, {N}));
  // dx: sums over C terms; dweight/dbias: sums over N rows of terms <= ~2.
  EXPECT_TRUE(all_close("ln dinp", dx1, dx2, 4 * C * kU * 8, 1e-5));
  EXPECT_TRUE(all_close("ln dweight", dw1, dw2, 4 * N * kU * 2, 0));
  EXPECT_TRUE(all_close("ln dbias", db1, db2, 4 * N * kU, 0));
}

// Per-element bound 2*K*u*(|A||B|)_ij on top of the reference value, for
// out = A (N,K) @ W(M,K)^T; computed by the reference on absolute values.
std::vector<double> gemm_bound(const std::vector<float>& a, const std::vector<float>& w, int N, int K,
                               int M, bool w_transposed) {
  std::vector<double> abs_a(a.begin(), a.end()), abs_w(w.begin(), w.end()), out(static_cast<size_t>(N) * M);
  for (double& v : abs_a) v = std::fabs(v);
  for (double& v : abs_w) v = std::fabs(v);
  for (int i = 0; i < N; ++i) {
    for (int j = 0; j < M; ++j) {
      double acc = 0;
      for (int k = 0; k < K; ++k) {
        double wv = w_transposed ? abs_w[static_cast<size_t>(j) * K + k] : abs_w[static_cast<size_t>(k) * M + j];
        acc += abs_a[static_cast<size_t>(i) * K + k] * wv;
      }
      out[static_cast<size_t>(i) * M + j] = 2.0 * (K + 1) * kU * acc;
    }
  }
  return out;
}

::testing::AssertionResult within_bound(const char* what, const std::vector<float>& actual,
                                        const std::vector<float>& expected, const std::vector<double>& bound,
                                        const std::vector<float>& start = {}) {
  for (size_t i = 0; i < actual.size(); ++i) {
    double slack = start.empty() ? 0.0 : 4 * kU * std::fabs(start[i]);  // the += onto `start`
    if (!(std::fabs(actual[i] - expected[i]) <= bound[i] + slack)) {
      return ::testing::AssertionFailure() << what << ": index " << i << " expected " << expected[i]
                                           << " actual " << actual[i] << " tolerance " << bound[i] + slack;
    }
  }
  return ::testing::AssertionSuccess();
}

TEST_P(KernelTest, Matmul) {
  const int N = s.B * s.T, C = s.C, OC = 3 * s.C + 5;
  auto x = random_vec(static_cast<size_t>(N * C), 21), w = random_vec(static_cast<size_t>(OC * C), 22);
  auto bias = random_vec(static_cast<size_t>(OC), 23);
  std::vector<float> o1(static_cast<size_t>(N * OC)), o2(o1.size()), o3(o1.size()), o4(o1.size());
  cpu->matmul_forward(view(o1, {N, OC}), view(x, {N, C}), view(w, {OC, C}), view(bias, {OC}));
  ref->matmul_forward(view(o2, {N, OC}), view(x, {N, C}), view(w, {OC, C}), view(bias, {OC}));
  auto bound = gemm_bound(x, w, N, C, OC, true);
  for (size_t i = 0; i < bound.size(); ++i) bound[i] += 2 * kU * std::fabs(bias[i % OC]);
  EXPECT_TRUE(within_bound("matmul out (bias)", o1, o2, bound));
  cpu->matmul_forward(view(o3, {N, OC}), view(x, {N, C}), view(w, {OC, C}), Tensor{});
  ref->matmul_forward(view(o4, {N, OC}), view(x, {N, C}), view(w, {OC, C}), Tensor{});
  EXPECT_TRUE(within_bound("matmul out (no bias)", o3, o4, gemm_bound(x, w, N, C, OC, true)));

  auto dout = random_vec(o1.size(), 24);
  std::vector<float> dx1(x.size()), dx2(x.size());
  auto dw1 = random_vec(w.size(), 25), db1 = random_vec(bias.size(), 26);
  auto dw2 = dw1, db2 = db1, dw_start = dw1;
  cpu->matmul_backward(view(dx1, {N, C}), view(dw1, {OC, C}), view(db1, {OC}), view(dout, {N, OC}),
                       view(x, {N, C}), view(w, {OC, C}));
  ref->matmul_backward(view(dx2, {N, C}), view(dw2, {OC, C}), view(db2, {OC}), view(dout, {N, OC}),
                       view(x, {N, C}), view(w, {OC, C}));
  EXPECT_TRUE(within_bound("matmul dinp", dx1, dx2, gemm_bound(dout, w, N, OC, C, false)));
  // dweight (OC,C) = dout^T (OC,N) @ x (N,C): bound from the transposed product.
  std::vector<float> dout_t(dout.size());
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < OC; ++j) dout_t[static_cast<size_t>(j) * N + i] = dout[static_cast<size_t>(i) * OC + j];
  EXPECT_TRUE(within_bound("matmul dweight", dw1, dw2, gemm_bound(dout_t, x, OC, N, C, false), dw_start));
  EXPECT_TRUE(all_close("matmul dbias", db1, db2, 4 * N * kU, 4 * kU));
}

TEST_P(KernelTest, Attention) {
  const int B = s.B, T = s.T, C = s.C, NH = s.NH, HS = C / NH;
  auto qkv = random_vec(static_cast<size_t>(B * T * 3 * C), 31, -2.0f, 2.0f);
  std::vector<float> o1(static_cast<size_t>(B * T * C)), o2(o1.size());
  std::vector<float> l1(static_cast<size_t>(B * NH * T)), l2(l1.size());
  cpu->attention_forward(view(o1, {B, T, C}), view(l1, {B, NH, T}), view(qkv, {B, T, 3 * C}), NH);
  ref->attention_forward(view(o2, {B, T, C}), view(l2, {B, NH, T}), view(qkv, {B, T, 3 * C}), NH);
  // Scores: HS-term dots of size <= 4; outputs: convex combinations of |v| <= 2
  // over up to T keys, with fast_exp's 2 ulp on every weight.
  const double score_tol = 4 * HS * kU * 4;
  EXPECT_TRUE(all_close("attention lse", l1, l2, 2 * score_tol, 1e-6));
  EXPECT_TRUE(all_close("attention out", o1, o2, 4 * T * kU * 2 + 2 * score_tol, 1e-5));

  auto dout = random_vec(o1.size(), 32);
  std::vector<float> d1(qkv.size(), 7.0f), d2(qkv.size(), 7.0f);  // '=' semantics: stale values vanish
  cpu->attention_backward(view(d1, {B, T, 3 * C}), view(dout, {B, T, C}), view(o2, {B, T, C}),
                          view(l2, {B, NH, T}), view(qkv, {B, T, 3 * C}), NH);
  ref->attention_backward(view(d2, {B, T, 3 * C}), view(dout, {B, T, C}), view(o2, {B, T, C}),
                          view(l2, {B, NH, T}), view(qkv, {B, T, 3 * C}), NH);
  // Gradients sum T terms, each a product of HS-term dots (size <= 8) and
  // inputs <= 2: the error scales like T*HS*u*16.
  EXPECT_TRUE(all_close("attention dqkv", d1, d2, 4.0 * T * HS * kU * 16, 1e-4));
}

TEST_P(KernelTest, Gelu) {
  const int64_t n = int64_t{s.B} * s.T * 4 * s.C;
  auto x = random_vec(static_cast<size_t>(n), 41, -6.0f, 6.0f);
  std::vector<float> o1(x.size()), o2(x.size());
  cpu->gelu_forward(view(o1, {n}), view(x, {n}));
  ref->gelu_forward(view(o2, {n}), view(x, {n}));
  // fast_tanh's 3e-7 absolute error, times 0.5|x| <= 3.
  EXPECT_TRUE(all_close("gelu out", o1, o2, 1e-6, 4 * kU));
  auto dout = random_vec(x.size(), 42);
  std::vector<float> d1(x.size()), d2(x.size());
  cpu->gelu_backward(view(d1, {n}), view(dout, {n}), view(x, {n}));
  ref->gelu_backward(view(d2, {n}), view(dout, {n}), view(x, {n}));
  EXPECT_TRUE(all_close("gelu dinp", d1, d2, 4e-6, 8 * kU));
  auto inplace = dout;  // dinp may alias dout
  cpu->gelu_backward(view(inplace, {n}), view(inplace, {n}), view(x, {n}));
  EXPECT_TRUE(all_close("gelu dinp in place", inplace, d1, 0, 0));
}

TEST_P(KernelTest, Residual) {
  const int64_t n = int64_t{s.B} * s.T * s.C;
  auto a = random_vec(static_cast<size_t>(n), 51), b = random_vec(static_cast<size_t>(n), 52);
  std::vector<float> o1(a.size()), o2(a.size());
  cpu->residual_forward(view(o1, {n}), view(a, {n}), view(b, {n}));
  ref->residual_forward(view(o2, {n}), view(a, {n}), view(b, {n}));
  EXPECT_TRUE(all_close("residual", o1, o2, 0, 0));
}

TEST_P(KernelTest, CrossEntropy) {
  const int N = s.B * s.T, V = s.V;
  auto z = random_vec(static_cast<size_t>(N * V), 61, -5.0f, 5.0f);
  auto tgt = random_tokens(static_cast<size_t>(N), V, 62);
  std::vector<float> l1(static_cast<size_t>(N)), l2(l1.size());
  cpu->crossentropy_forward(view(l1, {N}), view(z, {N, V}), tgt.data());
  ref->crossentropy_forward(view(l2, {N}), view(z, {N, V}), tgt.data());
  // log of a V-term sum; fast_exp's 2 ulp per term; terms of size <= 10.
  EXPECT_TRUE(all_close("ce loss", l1, l2, 4 * V * kU * 10, 0));
  std::vector<float> d1(z.size()), d2(z.size());
  const float dloss = 1.0f / static_cast<float>(N);
  cpu->crossentropy_backward(view(d1, {N, V}), view(z, {N, V}), tgt.data(), dloss);
  ref->crossentropy_backward(view(d2, {N, V}), view(z, {N, V}), tgt.data(), dloss);
  EXPECT_TRUE(all_close("ce dlogits", d1, d2, dloss * 4 * V * kU, 8 * kU));
  auto inplace = z;  // dlogits may alias logits
  cpu->crossentropy_backward(view(inplace, {N, V}), view(inplace, {N, V}), tgt.data(), dloss);
  EXPECT_TRUE(all_close("ce dlogits in place", inplace, d1, 0, 0));
}

TEST_P(KernelTest, AdamAndNorm) {
  const int64_t n = int64_t{s.V} * s.C + 3;
  auto p1 = random_vec(static_cast<size_t>(n), 71), g = random_vec(static_cast<size_t>(n), 72);
  auto m1 = random_vec(static_cast<size_t>(n), 73), v1 = random_vec(static_cast<size_t>(n), 74, 0.0f, 1.0f);
  auto p2 = p1, m2 = m1, v2 = v1;
  AdamCoefficients k{0.9f, 0.95f, 1e-8f, 1e-3f, 1.3f, 0.999f, 0.7f};
  cpu->adam_update(view(p1, {n}), view(g, {n}), view(m1, {n}), view(v1, {n}), k);
  ref->adam_update(view(p2, {n}), view(g, {n}), view(m2, {n}), view(v2, {n}), k);
  EXPECT_TRUE(all_close("adam m", m1, m2, 0, 2 * kU));
  EXPECT_TRUE(all_close("adam v", v1, v2, 0, 2 * kU));
  EXPECT_TRUE(all_close("adam param", p1, p2, 1e-3 * 8 * kU, 2 * kU));
  double s1 = cpu->sum_squares(view(g, {n})), s2 = ref->sum_squares(view(g, {n}));
  EXPECT_NEAR(s1, s2, 1e-12 * n) << "sum_squares accumulates in double on both sides";
  double exact = 0;
  for (int64_t i = 0; i < n; ++i) exact += static_cast<double>(g[static_cast<size_t>(i)]);
  EXPECT_EQ(cpu->sum(view(g, {n})), exact) << "sum adds in element order, in double";
  EXPECT_EQ(ref->sum(view(g, {n})), exact);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, KernelTest,
    ::testing::Combine(::testing::Values(Shape{2, 7, 48, 3, 37}, Shape{3, 64, 128, 2, 172},
                                         Shape{2, 150, 96, 3, 37},   // several 64-row attention tiles
                                         Shape{1, 5, 64, 2, 37}),    // few rows: the GEMV path
                       ::testing::Values(1, 2)));

}  // namespace
}  // namespace gpt2
