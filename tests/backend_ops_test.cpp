// The backend-ops test (suite core): every op of the op table on every host
// backend (the reference itself, the CPU backend at 1 and 2 threads) against
// the reference backend, at the shapes of backend_ops.h, with the tolerance
// table; the CUDA backend gets the same checks in cuda_backend_ops_test.cpp.
// What the table's cases check beyond the formula (op_table.h): '+=' outputs
// from nonzero starts, '=' outputs over stale 7s, the contract's in-place
// aliasing (equal to the out-of-place result exactly), matrix products with
// and without bias, attention and RoPE multi-head and grouped-query. Also
// here: the reference's own sum is the in-order double sum, its decode is
// the last row of its forward, its grouped-query attention is multi-head
// attention over repeated key/value heads, and every row of the tolerance
// table belongs to an output of the op table.
// The reference kernels themselves are checked against finite differences
// in gradcheck_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backend_ops.h"
#include "kernels/backend.h"
#include "kernels/ops/op_arrays.h"
#include "kernels/ops/op_check.h"
#include "kernels/ops/op_table.h"
#include "kernels/ops/tolerances.h"

namespace gpt2 {
namespace {

// threads 0: the reference backend; 1, 2: the CPU backend at that many threads.
class BackendOps : public ::testing::TestWithParam<std::tuple<ops::OpShape, int>> {
 protected:
  static std::unique_ptr<Backend> make(int threads) {
    return threads == 0 ? make_reference_backend() : make_cpu_backend(threads);
  }
  static std::string label(int threads) { return threads == 0 ? "reference" : "cpu/t" + std::to_string(threads); }
};

TEST_P(BackendOps, EveryOpMatchesTheReference) {
  const auto& [shape, threads] = GetParam();
  std::unique_ptr<Backend> be = make(threads);
  testing::check_every_op(*be, label(threads), shape);
}

INSTANTIATE_TEST_SUITE_P(Shapes, BackendOps,
                         ::testing::Combine(::testing::ValuesIn(testing::backend_ops_shapes()),
                                            ::testing::Values(0, 1, 2)),
                         [](const auto& info) {
                           const int threads = std::get<1>(info.param);
                           return testing::shape_name(std::get<0>(info.param)) +
                                  (threads == 0 ? "_reference" : "_cpu_t" + std::to_string(threads));
                         });

// The bf16 rows (the ops that take a stored activation, with it in bf16) on
// the reference itself and the CPU backend with bf16 products at 1 and 2
// threads, against the reference, within the bf16 rows of the tolerance table.
class BackendOpsBf16 : public ::testing::TestWithParam<std::tuple<ops::OpShape, int>> {};

TEST_P(BackendOpsBf16, EveryBf16OpMatchesTheReference) {
  const auto& [shape, threads] = GetParam();
  std::unique_ptr<Backend> be =
      threads == 0 ? make_reference_backend() : make_cpu_backend(BackendOptions::with_threads(threads).with_bf16(true));
  testing::check_every_bf16_op(*be, threads == 0 ? "reference" : "cpu-bf16/t" + std::to_string(threads), shape);
}

INSTANTIATE_TEST_SUITE_P(Shapes, BackendOpsBf16,
                         ::testing::Combine(::testing::ValuesIn(testing::backend_ops_shapes()),
                                            ::testing::Values(0, 1, 2)),
                         [](const auto& info) {
                           const int threads = std::get<1>(info.param);
                           return testing::shape_name(std::get<0>(info.param)) +
                                  (threads == 0 ? "_reference" : "_cpu_bf16_t" + std::to_string(threads));
                         });

// The bf16 rows hold what they say: each case's stored operand is a bf16
// tensor (the backend sees dtype bf16), and a backend that does not accept
// bf16 refuses one instead of reading it as floats.
TEST(BackendOpsBf16, StoredOperandsAreBf16AndOthersRefuseThem) {
  const ops::OpShape s = testing::backend_ops_shapes().front();
  EXPECT_EQ(ops::op_table(ops::Dtype::bf16).size(), 23u);  // with the ring blocks: 4 rows, and .gqa
  for (const ops::OpSpec& spec : ops::op_table(ops::Dtype::bf16)) EXPECT_EQ(spec.dtype, ops::Dtype::bf16) << spec.name();
  EXPECT_FALSE(make_cpu_backend(1)->accepts_bf16());
  EXPECT_TRUE(make_cpu_backend(BackendOptions::with_threads(1).with_bf16(true))->accepts_bf16());
  std::unique_ptr<Backend> fp32 = make_cpu_backend(1);
  for (const char* name : {"matmul_forward.bf16", "matmul_backward.bf16"}) {
    auto c = ops::op_spec(name).make(s, host_memory());
    c->reset();
    EXPECT_THROW(c->run(*fp32), std::invalid_argument) << name;
  }
  // A bf16 output holds the float result rounded once: the reference's gelu into bf16 is to_bf16 of its f32 gelu.
  const ops::Expected f = ops::run_reference(ops::op_spec("gelu_forward"), s);
  const ops::Expected b = ops::run_reference(ops::op_spec("gelu_forward.bf16"), s);
  ASSERT_EQ(f.outputs[0].f32.size(), b.outputs[0].f32.size());
  size_t differ = 0;
  for (size_t i = 0; i < f.outputs[0].f32.size(); ++i) {
    ASSERT_EQ(b.outputs[0].f32[i], to_float(to_bf16(f.outputs[0].f32[i]))) << i;
    differ += b.outputs[0].f32[i] != f.outputs[0].f32[i];
  }
  EXPECT_GT(differ, f.outputs[0].f32.size() / 2);  // rounded: most values changed
}

// train.deterministic's CPU backend: every op of the table within its
// tolerance of the reference, and the same bits at 1 and 2 threads for every
// output (the default's order differs there: the norms' weight gradients and
// sum_squares, and at small shapes OpenBLAS's products).
// With either fp32 products' provider (train.gemm auto, which is OpenBLAS
// here, or onednn forced).
TEST(BackendOps, DeterministicBackendGivesTheSameBitsAtAnyThreadCount) {
  for (GemmChoice gemm : {GemmChoice::kAuto, GemmChoice::kOnednn}) {
    auto t1 = make_cpu_backend(BackendOptions::with_threads(1).with_deterministic(true).with_gemm(gemm)),
         t2 = make_cpu_backend(BackendOptions::with_threads(2).with_deterministic(true).with_gemm(gemm));
    const std::string label = "cpu-deterministic/gemm " + to_string(gemm);
    // And 1,152 rows: more than one row of the fixed 1024-row tiles.
    std::vector<ops::OpShape> shapes = testing::backend_ops_shapes();
    shapes.push_back(ops::OpShape{9, 128, 64, 2, 37, 3 * 64 + 5, 37 * 64 + 3});
    for (const ops::OpShape& s : shapes) {
      testing::check_every_op(*t2, label + "/t2", s);
      testing::expect_thread_invariant(*t1, *t2, label, s);
    }
    EXPECT_NE(t2->name().find("deterministic"), std::string::npos) << t2->name();
  }
}

// The oracle of the "sum" rows (exact): every host backend's sum is the
// element-order sum in double, not merely the reference's.
TEST(BackendOps, HostSumIsTheInOrderDoubleSum) {
  for (const ops::OpShape& s : testing::backend_ops_shapes()) {
    std::vector<float> x = ops::random_values(static_cast<size_t>(s.P), 72);
    double in_order = 0;
    for (float v : x) in_order += static_cast<double>(v);
    for (auto& be : {make_reference_backend(), make_cpu_backend(1), make_cpu_backend(2)}) {
      ++testing::backend_ops_checks();
      EXPECT_EQ(be->sum(Tensor(x.data(), {s.P})), in_order) << be->name() << " at " << s.str();
    }
  }
}

// The decode rows compare every backend with the reference's full forward;
// the reference's own decode is that row exactly (the same attention_row),
// multi-head and grouped.
TEST(BackendOps, ReferenceDecodeIsTheLastRowOfItsForward) {
  for (const ops::OpShape& s : testing::backend_ops_shapes()) {
    for (const std::string variant : {"", ".gqa"}) {
      const ops::OpOutput full = ops::run_reference(ops::op_spec("attention_forward" + variant), s).outputs.at(1);
      const ops::OpOutput decode = ops::run_reference(ops::op_spec("attention_decode" + variant), s).outputs.at(0);
      const auto row = full.f32.begin() + (s.T - 1) * s.C;
      testing::expect_match("reference attention_decode" + variant + " at " + s.str(), decode,
                            ops::OpOutput{"out", std::vector<float>(row, row + s.C), {}}, ops::Tolerance{});
    }
  }
}

// The grouped-query variants really group (KVH < NH wherever NH > 1), and
// with KVH = NH the reference's grouped-query kernels are its multi-head ones
// exactly: a grouped layout whose key and value heads are repeated per query
// head gives the multi-head result, each repeated head's gradient summed.
TEST(BackendOps, ReferenceGroupedQueryAttentionIsRepeatedHeads) {
  for (const ops::OpShape& s : testing::backend_ops_shapes()) {
    const int NH = static_cast<int>(s.NH), KVH = static_cast<int>(ops::gqa_kv_heads(s.NH)), G = NH / KVH;
    const int B = static_cast<int>(s.B), T = static_cast<int>(s.T), C = static_cast<int>(s.C), HS = C / NH;
    EXPECT_LT(KVH, NH) << s.str();
    const ops::OpSpec& fwd = ops::op_spec("attention_forward.gqa");
    EXPECT_EQ(fwd.shape(s).KVH, KVH);
    // The grouped qkv (B,T,(NH+2KVH)HS), and its multi-head copy (B,T,3C)
    // with kv head h/G in place of head h.
    const std::vector<float> g = ops::random_values(static_cast<size_t>(B * T * (NH + 2 * KVH) * HS), 31, -2, 2);
    std::vector<float> mh(static_cast<size_t>(B * T * 3 * C));
    for (int r = 0; r < B * T; ++r) {
      const float* src = g.data() + static_cast<size_t>(r) * (NH + 2 * KVH) * HS;
      float* dst = mh.data() + static_cast<size_t>(r) * 3 * C;
      for (int h = 0; h < NH; ++h) {
        for (int i = 0; i < HS; ++i) {
          dst[h * HS + i] = src[h * HS + i];
          dst[C + h * HS + i] = src[(NH + h / G) * HS + i];
          dst[2 * C + h * HS + i] = src[(NH + KVH + h / G) * HS + i];
        }
      }
    }
    auto ref = make_reference_backend();
    std::vector<float> out_g(static_cast<size_t>(B * T * C)), out_m(out_g.size());
    std::vector<float> lse_g(static_cast<size_t>(B * NH * T)), lse_m(lse_g.size());
    std::vector<float> gq(g), mq(mh);
    ref->attention_forward(Tensor(out_g.data(), {B, T, C}), Tensor(lse_g.data(), {B, NH, T}),
                           Tensor(gq.data(), {B, T, (NH + 2 * KVH) * HS}), NH, KVH);
    ref->attention_forward(Tensor(out_m.data(), {B, T, C}), Tensor(lse_m.data(), {B, NH, T}),
                           Tensor(mq.data(), {B, T, 3 * C}), NH, NH);
    ++testing::backend_ops_checks();
    EXPECT_EQ(out_g, out_m) << s.str();
    EXPECT_EQ(lse_g, lse_m) << s.str();
    // dK and dV: the grouped kernel sums the group's query heads in order,
    // the sum of the multi-head gradients of the repeated heads (up to the
    // order of the additions: within the backward tolerance).
    const std::vector<float> dout = ops::random_values(out_g.size(), 32);
    std::vector<float> d_g(g.size()), d_m(mh.size()), dout_c(dout);
    ref->attention_backward(Tensor(d_g.data(), {B, T, (NH + 2 * KVH) * HS}), Tensor(dout_c.data(), {B, T, C}),
                            Tensor(out_g.data(), {B, T, C}), Tensor(lse_g.data(), {B, NH, T}),
                            Tensor(gq.data(), {B, T, (NH + 2 * KVH) * HS}), NH, KVH);
    ref->attention_backward(Tensor(d_m.data(), {B, T, 3 * C}), Tensor(dout_c.data(), {B, T, C}),
                            Tensor(out_m.data(), {B, T, C}), Tensor(lse_m.data(), {B, NH, T}),
                            Tensor(mq.data(), {B, T, 3 * C}), NH, NH);
    std::vector<float> summed(g.size(), 0.0f);
    for (int r = 0; r < B * T; ++r) {
      const float* src = d_m.data() + static_cast<size_t>(r) * 3 * C;
      float* dst = summed.data() + static_cast<size_t>(r) * (NH + 2 * KVH) * HS;
      for (int h = 0; h < NH; ++h) {
        for (int i = 0; i < HS; ++i) {
          dst[h * HS + i] = src[h * HS + i];
          dst[(NH + h / G) * HS + i] += src[C + h * HS + i];
          dst[(NH + KVH + h / G) * HS + i] += src[2 * C + h * HS + i];
        }
      }
    }
    const ops::Tolerance tol =
        ops::tolerance("attention_backward", "dqkv", ops::Dtype::f32, ops::ToleranceFacts{fwd.shape(s), {}, {}});
    testing::expect_match("reference attention_backward.gqa at " + s.str() + " against repeated heads",
                          ops::OpOutput{"dqkv", d_g, {}}, ops::OpOutput{"dqkv", summed, {}}, tol);
  }
}

// Every output of every case has a row, and every row an output: no
// tolerance lives anywhere else, and none is left over from a removed op.
TEST(BackendOps, ToleranceTableMatchesTheOpTable) {
  const ops::OpShape s = testing::backend_ops_shapes().front();
  std::set<std::string> outputs;
  for (const ops::OpSpec& spec : ops::op_table()) {
    const ops::Expected e = ops::run_reference(spec, s);  // throws for an output without a row
    ASSERT_EQ(e.outputs.size(), e.tolerances.size()) << spec.name();
    for (const ops::OpOutput& o : e.outputs) outputs.insert(spec.op + "/" + o.name);
  }
  const std::vector<std::string> rows = ops::tolerance_keys(ops::Dtype::f32);
  EXPECT_EQ(outputs, std::set<std::string>(rows.begin(), rows.end()));
  std::set<std::string> bf16_outputs;
  for (const ops::OpSpec& spec : ops::op_table(ops::Dtype::bf16)) {
    const ops::Expected e = ops::run_reference(spec, s);
    ASSERT_EQ(e.outputs.size(), e.tolerances.size()) << spec.name();
    for (const ops::OpOutput& o : e.outputs) bf16_outputs.insert(spec.op + "/" + o.name);
  }
  const std::vector<std::string> bf16_rows = ops::tolerance_keys(ops::Dtype::bf16);
  EXPECT_EQ(bf16_outputs, std::set<std::string>(bf16_rows.begin(), bf16_rows.end()));
  EXPECT_THROW(ops::tolerance("gelu_forward", "nope", ops::Dtype::f32, {s, {}, {}}), std::invalid_argument);
}

const auto* const kCount = ::testing::AddGlobalTestEnvironment(new testing::CountChecks);

}  // namespace
}  // namespace gpt2
