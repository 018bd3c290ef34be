// The backend-ops test on the CUDA backend (suite cuda): the checks of
// backend_ops_test.cpp (every op of the op table against the reference
// backend, at the same shapes, with the tolerance table plus its documented
// device adjustment) through the Backend interface, so the host staging of
// tokens and targets, cuBLAS's products and the device memory are included.
// Attention at a head size the CUDA kernels do not take (HS 16 at the first
// shape) is skipped and printed (cuda_unsupported). cuda_kernels_test.cpp
// runs the same checks on each kernel at the shapes its code paths need, and
// tests what the op table cannot express on the launchers. Exits 77 (meson:
// skipped) where there is no CUDA device.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "kernels/ops/op_table.h"

#include "backend_ops.h"
#include "cuda_test_main.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace gpt2 {
namespace {

class CudaBackendOps : public ::testing::TestWithParam<ops::OpShape> {};

TEST_P(CudaBackendOps, EveryOpMatchesTheReference) {
  std::unique_ptr<Backend> be = make_cuda_backend();
  testing::check_every_op(*be, "cuda", GetParam(), [](const std::string& op, const ops::OpShape& s) {
    return cuda_unsupported(op, s.C, s.NH);
  });
}

// train.precision bf16 on the CUDA stages: the products' bf16 rows (their
// input bf16, the weight and output gradient rounded on the device by
// to_bf16, fp32 sums in cublasGemmEx) within the same derived tolerances as
// the CPU's; a second run equals the first bit for bit.
TEST_P(CudaBackendOps, Bf16ProductsMatchTheReference) {
  std::unique_ptr<Backend> be = make_cuda_backend({.bf16 = true});
  EXPECT_FALSE(be->accepts_bf16()) << "activations stay f32 on the device";
  for (const char* name : {"matmul_forward", "matmul_forward.nobias", "matmul_backward", "matmul_backward.nobias"}) {
    testing::check_op(*be, "cuda-bf16", ops::op_spec(std::string(name) + ".bf16"), GetParam(), {}, true);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaBackendOps, ::testing::ValuesIn(testing::backend_ops_shapes()),
                         [](const auto& info) { return testing::shape_name(info.param); });

const auto* const kCount = ::testing::AddGlobalTestEnvironment(new testing::CountChecks);

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) { return gpt2::testing::cuda_test_main(argc, argv); }
