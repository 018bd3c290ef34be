// GPU tests of the CUDA kernels (core/kernels/cuda/kernels.h), in two parts.
//  1. Every kernel through the op table (tests/backend_ops.h, check_op) on
//     the CUDA backend, at the shapes its code paths need (listed with the
//     kernels below: every attention head size, T off the tiles and
//     T = 1024, the float4 and scalar paths of the bias, the column-sum
//     chunks of the norms, vocabularies up to 50304, ten million elements for
//     the reductions): each output within the tolerance table's row (plus
//     its device adjustment) of the reference backend's, on the table's
//     inputs; the in-place forms equal to the out-of-place ones; a second run
//     bitwise equal to the first.
//  2. What the op table cannot express, on the launchers: scratch and outputs
//     not written past their end (guard zones), element-wise kernels at an
//     odd length and on misaligned pointers (the float4 path's tail and the
//     scalar path), silu_backward's dinp aliasing inp, inputs at the edges (a
//     row whose variance is below eps, expf overflowing), SwiGLU at an odd
//     width, attention's partial rows (first_row) and a grouped-query forward
//     bitwise the multi-head one on the expanded input, and the shapes the
//     attention kernels refuse. Values are held to the reference kernels with
//     the same tolerance rows (within_table).
// The tolerances are the table's derived worst-case bounds, which grow with
// the reduction length: at the largest shapes here they are far looser than
// the fixed tolerances this file used before (attention_backward's dqkv at
// T 1024 about 0.25 absolute against 5e-5; crossentropy at V 50304 about 0.12
// against 2e-5): one source of truth over a tight empirical bound, until a
// GPU session records the measured errors and tightens those table rows
// (docs/status.md).
// Inputs come from the one random scheme (the op table's; test_util.h).
// The arithmetic is also tested without a GPU in device_math_test.cpp.
// Exits 77 (meson: skipped) where there is no CUDA device.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <ostream>
#include <utility>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend_ops.h"
#include "kernels/bf16.h"
#include "cuda_test_main.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/kernels.h"
#include "kernels/ops/op_check.h"
#include "kernels/ops/op_table.h"
#include "kernels/ops/tolerances.h"
#include "kernels/reference/reference_kernels.h"
#include "test_util.h"

namespace gpt2::cuda {
namespace {

using gpt2::testing::random_vec;

// ============================================================ 1. the op table

// An entry of the op table and a shape it runs at (only the fields the op
// reads, op_costs.h).
struct KernelCase {
  std::string op;
  ops::OpShape shape;
};

// "attention_forward_B4_T256_C384_NH6_KVH2": the nonzero sizes.
std::string case_name(const KernelCase& k) {
  std::string name = k.op;
  std::replace(name.begin(), name.end(), '.', '_');
  const ops::OpShape& s = k.shape;
  const std::pair<const char*, int64_t> sizes[] = {{"B", s.B}, {"T", s.T},   {"C", s.C}, {"NH", s.NH},
                                                   {"V", s.V}, {"OC", s.OC}, {"P", s.P}, {"KVH", s.KVH}};
  for (const auto& [letter, size] : sizes) {
    if (size != 0) name += fmt::format("_{}{}", letter, size);
  }
  return name;
}

// gtest prints a parameter with it: "attention_forward at B 2 T 77 C 256 NH 8 ...".
void PrintTo(const KernelCase& k, std::ostream* os) { *os << k.op << " at " << k.shape.str(); }

std::vector<KernelCase> kernel_cases() {
  std::vector<KernelCase> cases;
  auto add = [&](std::initializer_list<const char*> names, const ops::OpShape& s) {
    for (const char* op : names) cases.push_back({op, s});
  };
  // The embedding: its backward's token buckets (wte) and row sums (wpe).
  add({"encoder_forward", "encoder_backward"}, {.B = 4, .T = 64, .C = 384, .V = 50});
  // N = 1000 rows (4 row chunks of the column sums); C the model's two
  // widths and one that is not a multiple of 4.
  for (const int64_t C : {384, 768, 100}) {
    add({"layernorm_forward", "layernorm_backward", "rmsnorm_forward", "rmsnorm_backward"},
        {.B = 8, .T = 125, .C = C});
  }
  // cuBLAS's products and the bias kernels (add_bias, bias_backward) on
  // N = 4096 rows: OC = V of the small config (float4 path), 3C = 2304, 45
  // (scalar path); and the original model's qkv product (N 256, C 384, OC
  // 1152), with and without bias.
  for (const int64_t OC : {172, 2304, 45}) {
    add({"matmul_forward", "matmul_backward"}, {.B = 4, .T = 1024, .C = 64, .OC = OC});
  }
  add({"matmul_forward", "matmul_backward", "matmul_forward.nobias", "matmul_backward.nobias"},
      {.B = 4, .T = 64, .C = 384, .OC = 1152});
  // Attention: the model's two configs (HS 64; T 1024 for the larger), HS 32,
  // 96 and 128 (every kernel instantiation), T off the 32- and 64-row tiles;
  // then grouped query heads: G = 4 (HS 32), G = 3 (HS 64) and one
  // key/value head (HS 128).
  for (const ops::OpShape& s : {ops::OpShape{.B = 4, .T = 256, .C = 384, .NH = 6},
                                ops::OpShape{.B = 1, .T = 1024, .C = 768, .NH = 12},
                                ops::OpShape{.B = 2, .T = 77, .C = 128, .NH = 4},
                                ops::OpShape{.B = 1, .T = 50, .C = 192, .NH = 2},
                                ops::OpShape{.B = 2, .T = 100, .C = 256, .NH = 2},
                                ops::OpShape{.B = 2, .T = 77, .C = 256, .NH = 8, .KVH = 2},
                                ops::OpShape{.B = 1, .T = 300, .C = 768, .NH = 12, .KVH = 4},
                                ops::OpShape{.B = 2, .T = 100, .C = 512, .NH = 4, .KVH = 1}}) {
    add({"attention_forward", "attention_backward", "attention_decode"}, s);
  }
  // RoPE: multi-head at the model's size (positions up to 1028), grouped,
  // multi-query, and HS 6 (not a multiple of 4).
  for (const ops::OpShape& s : {ops::OpShape{.B = 2, .T = 1024, .C = 768, .NH = 12},
                                ops::OpShape{.B = 2, .T = 77, .C = 256, .NH = 8, .KVH = 2},
                                ops::OpShape{.B = 1, .T = 50, .C = 512, .NH = 4, .KVH = 1},
                                ops::OpShape{.B = 3, .T = 9, .C = 24, .NH = 4, .KVH = 2}}) {
    add({"rope_forward", "rope_backward"}, s);
  }
  // SwiGLU on 256 rows, hidden width 4C = 1536 (the small model) and 1024
  // (the odd width 37 is in part 2).
  for (const int64_t C : {384, 256}) add({"swiglu_forward", "swiglu_backward"}, {.B = 4, .T = 64, .C = C});
  // 64 rows of the small config's vocabulary, a tiny one and GPT-2's.
  for (const int64_t V : {172, 31, 50304}) {
    add({"crossentropy_forward", "crossentropy_backward"}, {.B = 1, .T = 64, .V = V});
  }
  // Element-wise kernels at about 10^5 elements (odd lengths: part 2).
  add({"gelu_forward", "gelu_backward", "relu_forward", "relu_backward", "silu_forward", "silu_backward",
       "residual_forward"},
      {.B = 1, .T = 97, .C = 257});
  add({"adam_update"}, {.P = (int64_t{1} << 20) + 3});
  // One element, one block's worth, and ten million (several passes).
  for (const int64_t P : {int64_t{1}, int64_t{1000}, int64_t{10'000'019}}) add({"sum_squares", "sum"}, {.P = P});
  return cases;
}

class CudaKernelOps : public ::testing::TestWithParam<KernelCase> {};

TEST_P(CudaKernelOps, MatchesTheReferenceAndRepeatsBitwise) {
  const KernelCase& k = GetParam();
  std::unique_ptr<Backend> be = make_cuda_backend();
  const testing::Unsupported unsupported = [](const std::string& op, const ops::OpShape& s) {
    return cuda_unsupported(op, s.C, s.NH);
  };
  testing::check_op(*be, "cuda", ops::op_spec(k.op), k.shape, unsupported, true);
  // The one-query decode is also the last row of the full forward.
  if (k.op == "attention_decode") testing::check_decode_is_last_row(*be, "cuda", "", k.shape, unsupported);
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaKernelOps, ::testing::ValuesIn(kernel_cases()),
                         [](const auto& info) { return case_name(info.param); });

// ============================================================ 2. the launchers

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

// A device copy of a host vector, plus kGuard elements after it that the
// kernels must not touch (filled with a sentinel, checked by guard_intact).
template <typename T>
class DeviceArray {
 public:
  static constexpr size_t kGuard = 256;
  explicit DeviceArray(const std::vector<T>& host) : n_(host.size()) {
    check(cudaMalloc(reinterpret_cast<void**>(&ptr_), (n_ + kGuard) * sizeof(T)), "cudaMalloc");
    std::vector<T> all(host);
    all.resize(n_ + kGuard, sentinel());
    check(cudaMemcpy(ptr_, all.data(), all.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  explicit DeviceArray(size_t n, T fill = T(0)) : DeviceArray(std::vector<T>(n, fill)) {}
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return ptr_; }
  std::vector<T> host() const {
    check(cudaDeviceSynchronize(), "kernels");
    std::vector<T> out(n_);
    check(cudaMemcpy(out.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return out;
  }
  bool guard_intact() const {
    check(cudaDeviceSynchronize(), "kernels");
    std::vector<T> guard(kGuard);
    check(cudaMemcpy(guard.data(), ptr_ + n_, kGuard * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return std::all_of(guard.begin(), guard.end(), [](T x) { return x == sentinel(); });
  }

 private:
  static T sentinel() { return static_cast<T>(-12345); }
  T* ptr_ = nullptr;
  size_t n_;
};

template <typename T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// The device's `got` (expected.size() floats) within the tolerance table's
// row for `output` of `op` at `shape`, with the device adjustment (as the op
// table's checks apply it), of `expected`: the reference kernel's on the host.
::testing::AssertionResult within_table(const std::string& op, const std::string& output, const ops::OpShape& shape,
                                        const float* got, const std::vector<float>& expected) {
  double scale = 0;
  for (float e : expected) scale = std::max(scale, std::fabs(static_cast<double>(e)));
  const ops::Tolerance tol =
      ops::device_tolerance(ops::tolerance(op, output, ops::Dtype::f32, ops::ToleranceFacts{shape, {}, {}}), scale);
  const std::string err = ops::compare(ops::OpOutput{output, std::vector<float>(got, got + expected.size()), {}},
                                       ops::OpOutput{output, expected, {}}, tol);
  if (err.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << op << " at " << shape.str() << ": " << err;
}
::testing::AssertionResult within_table(const std::string& op, const std::string& output, const ops::OpShape& shape,
                                        const std::vector<float>& got, const std::vector<float>& expected) {
  if (got.size() != expected.size()) {
    return ::testing::AssertionFailure() << op << " " << output << ": " << got.size() << " values, expected "
                                         << expected.size();
  }
  return within_table(op, output, shape, got.data(), expected);
}

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override { check(cudaStreamCreate(&stream_), "cudaStreamCreate"); }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

// ------------------------------------------------------------ layernorm, rmsnorm

// Row 0 is scaled by 1e-3: its variance (mean square) lies below eps = 1e-5,
// so eps matters there; the table's inputs never get that small. The
// backward's +=  outputs start random, its scratch has a guard zone.
class CudaNormAtTheEdge : public CudaKernels, public ::testing::WithParamInterface<int> {};

TEST_P(CudaNormAtTheEdge, LayernormWithARowBelowEps) {
  const int N = 1000, C = GetParam();
  const ops::OpShape s{.B = 1, .T = N, .C = C};
  auto inp = random_vec(static_cast<size_t>(N) * C, 10, -2.0f, 3.0f);
  for (int c = 0; c < C; ++c) inp[c] *= 0.001f;
  const auto weight = random_vec(C, 11), bias = random_vec(C, 12), dout = random_vec(inp.size(), 13);
  const auto dinp0 = random_vec(inp.size(), 14), dweight0 = random_vec(C, 15), dbias0 = random_vec(C, 16);

  std::vector<float> out(inp.size()), mean(N), rstd(N);
  ref::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
  DeviceArray<float> d_inp(inp), d_weight(weight), d_bias(bias), d_out(inp.size(), NAN), d_mean(N, NAN),
      d_rstd(N, NAN);
  layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_weight.get(), d_bias.get(), N, C,
                    stream_);
  EXPECT_TRUE(within_table("layernorm_forward", "out", s, d_out.host(), out));
  EXPECT_TRUE(within_table("layernorm_forward", "mean", s, d_mean.host(), mean));
  EXPECT_TRUE(within_table("layernorm_forward", "rstd", s, d_rstd.host(), rstd));

  // The backward from the reference's statistics, on both sides.
  auto dinp = dinp0, dweight = dweight0, dbias = dbias0;
  ref::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                          mean.data(), rstd.data(), N, C);
  DeviceArray<float> r_mean(mean), r_rstd(rstd), d_dout(dout), d_dinp(dinp0), d_dweight(dweight0), d_dbias(dbias0);
  DeviceArray<float> scratch(layernorm_backward_scratch_floats(N, C), NAN);
  layernorm_backward(d_dinp.get(), d_dweight.get(), d_dbias.get(), scratch.get(), d_dout.get(), d_inp.get(),
                     d_weight.get(), r_mean.get(), r_rstd.get(), N, C, stream_);
  EXPECT_TRUE(within_table("layernorm_backward", "dinp", s, d_dinp.host(), dinp));
  EXPECT_TRUE(within_table("layernorm_backward", "dweight", s, d_dweight.host(), dweight));
  EXPECT_TRUE(within_table("layernorm_backward", "dbias", s, d_dbias.host(), dbias));
  EXPECT_TRUE(scratch.guard_intact()) << "layernorm_backward wrote past its scratch";
}

TEST_P(CudaNormAtTheEdge, RmsnormWithARowBelowEps) {
  const int N = 1000, C = GetParam();
  const ops::OpShape s{.B = 1, .T = N, .C = C};
  auto inp = random_vec(static_cast<size_t>(N) * C, 17, -2.0f, 3.0f);
  for (int c = 0; c < C; ++c) inp[c] *= 0.001f;
  const auto weight = random_vec(C, 18), dout = random_vec(inp.size(), 19);
  const auto dinp0 = random_vec(inp.size(), 23), dweight0 = random_vec(C, 24);

  std::vector<float> out(inp.size()), rstd(N);
  ref::rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C);
  DeviceArray<float> d_inp(inp), d_weight(weight), d_out(inp.size(), NAN), d_rstd(N, NAN);
  rmsnorm_forward(d_out.get(), d_rstd.get(), d_inp.get(), d_weight.get(), N, C, stream_);
  EXPECT_TRUE(within_table("rmsnorm_forward", "out", s, d_out.host(), out));
  EXPECT_TRUE(within_table("rmsnorm_forward", "rstd", s, d_rstd.host(), rstd));

  auto dinp = dinp0, dweight = dweight0;
  ref::rmsnorm_backward(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(), rstd.data(), N, C);
  DeviceArray<float> r_rstd(rstd), d_dout(dout), d_dinp(dinp0), d_dweight(dweight0);
  DeviceArray<float> scratch(rmsnorm_backward_scratch_floats(N, C), NAN);
  rmsnorm_backward(d_dinp.get(), d_dweight.get(), scratch.get(), d_dout.get(), d_inp.get(), d_weight.get(),
                   r_rstd.get(), N, C, stream_);
  EXPECT_TRUE(within_table("rmsnorm_backward", "dinp", s, d_dinp.host(), dinp));
  EXPECT_TRUE(within_table("rmsnorm_backward", "dweight", s, d_dweight.host(), dweight));
  EXPECT_TRUE(scratch.guard_intact()) << "rmsnorm_backward wrote past its scratch";
}

INSTANTIATE_TEST_SUITE_P(Channels, CudaNormAtTheEdge, ::testing::Values(384, 768, 100));

// ------------------------------------------------------------ bias

// bias_backward's scratch at the op table's bias shapes (part 1 checks its values).
TEST_F(CudaKernels, BiasBackwardStaysInItsScratch) {
  const int N = 4096;
  for (const int OC : {172, 2304, 45}) {
    const auto dout = random_vec(static_cast<size_t>(N) * OC, 20), dbias = random_vec(OC, 22);
    DeviceArray<float> d_dout(dout), d_dbias(dbias), scratch(bias_backward_scratch_floats(N, OC), NAN);
    bias_backward(d_dbias.get(), scratch.get(), d_dout.get(), N, OC, stream_);
    EXPECT_TRUE(scratch.guard_intact()) << "bias_backward wrote past its scratch, OC " << OC;
    EXPECT_TRUE(d_dbias.guard_intact()) << "bias_backward wrote past dbias, OC " << OC;
  }
}

// ------------------------------------------------------------ bf16

// The device's conversion of a product's operands (train.precision bf16) is
// the host's to_bf16 bit for bit, on the special values and on a million
// drawn floats of every exponent, and stays inside its output.
TEST_F(CudaKernels, ToBf16IsTheHostsRounding) {
  std::vector<float> in = {0.0f, -0.0f, 1.0f, 1.00390625f, 1.01171875f, 3.0e-39f, 1e-45f, 3.3895e38f, 3.4028e38f,
                           INFINITY, -INFINITY, NAN, std::bit_cast<float>(0x7f800001u), 0.1f};
  uint64_t x = 0x9e3779b97f4a7c15ull;
  while (in.size() < 1000003) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    in.push_back(std::bit_cast<float>(static_cast<uint32_t>(x)));
  }
  DeviceArray<float> d_in(in);
  DeviceArray<uint16_t> d_out(in.size());
  to_bf16(d_out.get(), d_in.get(), static_cast<int64_t>(in.size()), stream_);
  std::vector<uint16_t> want(in.size());
  for (size_t i = 0; i < in.size(); ++i) want[i] = gpt2::to_bf16(in[i]).bits;
  EXPECT_TRUE(bitwise_equal(d_out.host(), want));
  EXPECT_TRUE(d_out.guard_intact()) << "to_bf16 wrote past its output";
}

// ------------------------------------------------------------ attention

// NH query heads over KVH key/value heads; qkv rows (NH + 2 KVH) HS wide.
struct Shape {
  int B, T, C, NH, KVH;
};

// The (B,T,3C) multi-head input equivalent to a grouped one (each query
// head gets its own copy of its group's key and value heads).
std::vector<float> expand_kv(const std::vector<float>& qkv, const Shape& s) {
  const int HS = s.C / s.NH, G = s.NH / s.KVH, W = (s.NH + 2 * s.KVH) * HS;
  std::vector<float> out(static_cast<size_t>(s.B) * s.T * 3 * s.C);
  for (int64_t n = 0; n < static_cast<int64_t>(s.B) * s.T; ++n) {
    const float* row = qkv.data() + n * W;
    float* dst = out.data() + n * 3 * s.C;
    for (int h = 0; h < s.NH; ++h) {
      std::copy(row + h * HS, row + (h + 1) * HS, dst + h * HS);
      std::copy(row + (s.NH + h / G) * HS, row + (s.NH + h / G + 1) * HS, dst + s.C + h * HS);
      std::copy(row + (s.NH + s.KVH + h / G) * HS, row + (s.NH + s.KVH + h / G + 1) * HS, dst + 2 * s.C + h * HS);
    }
  }
  return out;
}

class CudaAttention : public CudaKernels, public ::testing::WithParamInterface<Shape> {};

// Part 1 holds the values to the reference; here the launcher's own rules.
TEST_P(CudaAttention, PartialRowsGroupedHeadsAndBounds) {
  const Shape shape = GetParam();
  const auto [B, T, C, NH, KVH] = shape;
  const int64_t W = static_cast<int64_t>(NH + 2 * KVH) * (C / NH);
  const auto qkv = random_vec(static_cast<size_t>(B) * T * W, 30 + T, -2.0f, 2.0f);
  const auto dout = random_vec(static_cast<size_t>(B) * T * C, 31 + T);
  const size_t lse_size = static_cast<size_t>(B) * NH * T;
  DeviceArray<float> d_qkv(qkv), d_out(dout.size(), NAN), d_lse(lse_size, NAN);
  attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH, KVH, 0, stream_);
  const auto out = d_out.host(), lse = d_lse.host();
  EXPECT_TRUE(d_out.guard_intact() && d_lse.guard_intact()) << "attention_forward wrote past out or lse";

  if (KVH != NH) {
    // Sharing key/value heads changes no arithmetic: bitwise the multi-head
    // kernel on the expanded input.
    DeviceArray<float> d_exp(expand_kv(qkv, shape)), d_mha(dout.size(), NAN), d_mha_lse(lse_size, NAN);
    attention_forward(d_mha.get(), d_mha_lse.get(), d_exp.get(), B, T, C, NH, NH, 0, stream_);
    EXPECT_TRUE(bitwise_equal(out, d_mha.host())) << "grouped forward differs from the expanded multi-head one";
    EXPECT_TRUE(bitwise_equal(lse, d_mha_lse.host()));
  }

  // first_row = T/2 without lse: the same rows, the same arithmetic.
  const int first_row = T / 2, R = T - first_row;
  DeviceArray<float> d_part(static_cast<size_t>(B) * R * C, NAN);
  attention_forward(d_part.get(), nullptr, d_qkv.get(), B, T, C, NH, KVH, first_row, stream_);
  std::vector<float> expect;
  for (int b = 0; b < B; ++b) {
    auto from = out.begin() + (static_cast<int64_t>(b) * T + first_row) * C;
    expect.insert(expect.end(), from, from + static_cast<int64_t>(R) * C);
  }
  EXPECT_TRUE(bitwise_equal(d_part.host(), expect)) << "attention_forward from row " << first_row;
  EXPECT_TRUE(d_part.guard_intact()) << "attention_forward wrote past its partial rows";

  DeviceArray<float> d_dout(dout), d_dqkv(qkv.size(), NAN), scratch(attention_backward_scratch_floats(B, T, NH), NAN);
  attention_backward(d_dqkv.get(), scratch.get(), d_dout.get(), d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH,
                     KVH, stream_);
  EXPECT_TRUE(scratch.guard_intact()) << "attention_backward wrote past its scratch";
  EXPECT_TRUE(d_dqkv.guard_intact()) << "attention_backward wrote past dqkv";
}

// The shapes of part 1's attention cases.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention,
                         ::testing::Values(Shape{4, 256, 384, 6, 6}, Shape{1, 1024, 768, 12, 12},
                                           Shape{2, 77, 128, 4, 4}, Shape{1, 50, 192, 2, 2},
                                           Shape{2, 100, 256, 2, 2}, Shape{2, 77, 256, 8, 2},
                                           Shape{1, 300, 768, 12, 4}, Shape{2, 100, 512, 4, 1}));

TEST_F(CudaKernels, AttentionRejectsUnsupportedShapes) {
  EXPECT_THROW(attention_forward(nullptr, nullptr, nullptr, 1, 8, 96, 2, 2, 0, stream_), std::invalid_argument);
  EXPECT_THROW(attention_forward(nullptr, nullptr, nullptr, 1, 8, 512, 2, 2, 0, stream_), std::invalid_argument);
  EXPECT_THROW(attention_forward(nullptr, nullptr, nullptr, 1, 8, 64, 2, 2, 8, stream_), std::invalid_argument);
  EXPECT_THROW(attention_forward(nullptr, nullptr, nullptr, 1, 8, 192, 6, 4, 0, stream_), std::invalid_argument);
  EXPECT_THROW(attention_forward(nullptr, nullptr, nullptr, 1, 8, 192, 6, 0, 0, stream_), std::invalid_argument);
  EXPECT_THROW(attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, 100, 2, 2, stream_),
               std::invalid_argument);
  EXPECT_THROW(attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, 128, 4, 3, stream_),
               std::invalid_argument);
}

// ------------------------------------------------------------ rope

// rope writes only qkv (part 1 checks its values at these shapes).
TEST_F(CudaKernels, RopeStaysInQkv) {
  for (const Shape& s : {Shape{2, 1024, 768, 12, 12}, Shape{2, 77, 256, 8, 2}, Shape{1, 50, 512, 4, 1},
                         Shape{3, 9, 24, 4, 2}}) {
    const int HS = s.C / s.NH;
    DeviceArray<float> d_qkv(random_vec(static_cast<size_t>(s.B) * s.T * (s.NH + 2 * s.KVH) * HS, 33));
    for (const bool inverse : {false, true}) {
      rope(d_qkv.get(), s.B, s.T, s.NH, s.KVH, HS, 5, 10000.0f, inverse, stream_);
      EXPECT_TRUE(d_qkv.guard_intact()) << "rope wrote past qkv at T " << s.T << ", inverse " << inverse;
    }
  }
}

// ------------------------------------------------------------ element-wise

// n = 100003 (not a multiple of 4: the float4 path's tail), from offset 0
// and from offset 1 (misaligned: the scalar path); inputs U(-6,6) with a 0
// (ReLU's kink, gradient 0) and -100 (expf overflows: SiLU gives -0). The
// backwards in place, dinp on dout (gelu, relu) or on inp (silu).
TEST_F(CudaKernels, ElementwiseAtAnOddLengthAndMisaligned) {
  const int64_t n = 100003;
  const ops::OpShape s{.B = 1, .T = 1, .C = n};  // the element-wise rows do not depend on it
  auto inp = random_vec(n + 1, 40, -6.0f, 6.0f);
  const auto dout = random_vec(n + 1, 41), other = random_vec(n + 1, 42);
  inp[10] = 0.0f;
  inp[11] = -100.0f;
  for (int offset = 0; offset < 2; ++offset) {
    SCOPED_TRACE(fmt::format("offset {}", offset));
    const std::vector<float> x(inp.begin() + offset, inp.begin() + offset + n);
    const std::vector<float> d(dout.begin() + offset, dout.begin() + offset + n);
    const std::vector<float> y(other.begin() + offset, other.begin() + offset + n);
    std::vector<float> gelu(n), dgelu(n), relu(n), drelu(n), silu(n), dsilu(n), sum(n);
    ref::gelu_forward(gelu.data(), x.data(), n);
    ref::gelu_backward(dgelu.data(), d.data(), x.data(), n);
    ref::relu_forward(relu.data(), x.data(), n);
    ref::relu_backward(drelu.data(), d.data(), x.data(), n);
    ref::silu_forward(silu.data(), x.data(), n);
    ref::silu_backward(dsilu.data(), d.data(), x.data(), n);
    ref::residual_forward(sum.data(), x.data(), y.data(), n);

    DeviceArray<float> d_inp(inp), d_other(other), d_out(n + 1, NAN);
    gelu_forward(d_out.get() + offset, d_inp.get() + offset, n, stream_);
    EXPECT_TRUE(within_table("gelu_forward", "out", s, d_out.host().data() + offset, gelu));
    relu_forward(d_out.get() + offset, d_inp.get() + offset, n, stream_);
    EXPECT_TRUE(within_table("relu_forward", "out", s, d_out.host().data() + offset, relu));
    silu_forward(d_out.get() + offset, d_inp.get() + offset, n, stream_);
    EXPECT_TRUE(within_table("silu_forward", "out", s, d_out.host().data() + offset, silu));
    residual_forward(d_out.get() + offset, d_inp.get() + offset, d_other.get() + offset, n, stream_);
    EXPECT_TRUE(within_table("residual_forward", "out", s, d_out.host().data() + offset, sum));
    EXPECT_TRUE(d_out.guard_intact()) << "an element-wise forward wrote past its output";
    {
      DeviceArray<float> d_d(dout);  // dinp aliases dout
      gelu_backward(d_d.get() + offset, d_d.get() + offset, d_inp.get() + offset, n, stream_);
      EXPECT_TRUE(within_table("gelu_backward", "dinp", s, d_d.host().data() + offset, dgelu));
    }
    {
      DeviceArray<float> d_d(dout);  // dinp aliases dout
      relu_backward(d_d.get() + offset, d_d.get() + offset, d_inp.get() + offset, n, stream_);
      EXPECT_TRUE(within_table("relu_backward", "dinp", s, d_d.host().data() + offset, drelu));
    }
    {
      DeviceArray<float> d_d(dout), d_x(inp);  // dinp aliases inp
      silu_backward(d_x.get() + offset, d_d.get() + offset, d_x.get() + offset, n, stream_);
      EXPECT_TRUE(within_table("silu_backward", "dinp", s, d_x.host().data() + offset, dsilu));
    }
  }
}

// SwiGLU at an odd hidden width (37; the table's is 4C), and its outputs'
// bounds at the table's widths too.
TEST_F(CudaKernels, SwigluAtAnOddWidth) {
  const int N = 256;
  for (const int H : {37, 1536, 1024}) {
    SCOPED_TRACE(fmt::format("H {}", H));
    const ops::OpShape s{.B = 1, .T = N, .C = H};  // the SwiGLU rows do not depend on it
    // Per row the gate (U(-6,6), as the table's) then the up projection (U(-1,1)).
    const auto gate = random_vec(static_cast<size_t>(N) * H, 45, -6.0f, 6.0f), up = random_vec(gate.size(), 46);
    std::vector<float> inp(static_cast<size_t>(N) * 2 * H);
    for (size_t r = 0; r < static_cast<size_t>(N); ++r) {
      std::copy_n(gate.begin() + r * H, H, inp.begin() + r * 2 * H);
      std::copy_n(up.begin() + r * H, H, inp.begin() + r * 2 * H + H);
    }
    const auto dout = random_vec(static_cast<size_t>(N) * H, 47);
    std::vector<float> out(dout.size()), dinp(inp.size());
    ref::swiglu_forward(out.data(), inp.data(), N, H);
    ref::swiglu_backward(dinp.data(), dout.data(), inp.data(), N, H);
    DeviceArray<float> d_inp(inp), d_dout(dout), d_out(dout.size(), NAN), d_dinp(inp.size(), NAN);
    swiglu_forward(d_out.get(), d_inp.get(), N, H, stream_);
    swiglu_backward(d_dinp.get(), d_dout.get(), d_inp.get(), N, H, stream_);
    if (H == 37) {
      EXPECT_TRUE(within_table("swiglu_forward", "out", s, d_out.host(), out));
      EXPECT_TRUE(within_table("swiglu_backward", "dinp", s, d_dinp.host(), dinp));
    }
    EXPECT_TRUE(d_out.guard_intact() && d_dinp.guard_intact()) << "swiglu wrote past its output";
  }
}

// ------------------------------------------------------------ reduce

// reduce_sum's scratch at the op table's sizes (part 1 checks its values).
TEST_F(CudaKernels, ReduceSumStaysInItsScratch) {
  for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{10'000'019}}) {
    DeviceArray<float> d_x(random_vec(static_cast<size_t>(n), 70, -3.0f, 3.0f));
    DeviceArray<double> result(1, NAN), scratch(reduce_scratch_doubles(), NAN);
    for (const bool square : {true, false}) {
      reduce_sum(result.get(), scratch.get(), d_x.get(), n, square, stream_);
      EXPECT_TRUE(scratch.guard_intact() && result.guard_intact()) << "reduce_sum wrote out of bounds, n " << n;
      EXPECT_TRUE(std::isfinite(result.host()[0])) << "n " << n;
    }
  }
}

}  // namespace
}  // namespace gpt2::cuda

int main(int argc, char** argv) { return gpt2::testing::cuda_test_main(argc, argv); }
