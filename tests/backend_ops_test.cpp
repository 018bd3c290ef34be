// The backend-ops test (suite core): every op of the op table on every host
// backend (the reference itself, the CPU backend at 1 and 2 threads) against
// the reference backend, at the shapes of backend_ops.h, with the tolerance
// table; the CUDA backend gets the same checks in cuda_backend_ops_test.cpp.
// What the table's cases check beyond the formula (op_table.h): '+=' outputs
// from nonzero starts, '=' outputs over stale 7s, the contract's in-place
// aliasing (equal to the out-of-place result exactly), matrix products with
// and without bias. Also here: the reference's own sum is the in-order
// double sum, its decode is the last row of its forward, and every row of
// the tolerance table belongs to an output of the op table.
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
// the reference's own decode is that row exactly (the same attention_row).
TEST(BackendOps, ReferenceDecodeIsTheLastRowOfItsForward) {
  for (const ops::OpShape& s : testing::backend_ops_shapes()) {
    const ops::OpOutput full = ops::run_reference(ops::op_spec("attention_forward"), s).outputs.at(1);
    const ops::OpOutput decode = ops::run_reference(ops::op_spec("attention_decode"), s).outputs.at(0);
    const auto row = full.f32.begin() + (s.T - 1) * s.C;
    testing::expect_match("reference attention_decode at " + s.str(), decode,
                          ops::OpOutput{"out", std::vector<float>(row, row + s.C), {}}, ops::Tolerance{});
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
  EXPECT_THROW(ops::tolerance("gelu_forward", "nope", ops::Dtype::f32, {s, {}, {}}), std::invalid_argument);
}

const auto* const kCount = ::testing::AddGlobalTestEnvironment(new testing::CountChecks);

}  // namespace
}  // namespace gpt2
