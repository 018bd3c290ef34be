// GPU tests of the CUDA kernels (core/kernels/cuda/kernels.h): every launcher
// runs on the device at the model's shapes and is held to the naive reference
// kernels on the host. Also checked: scratch sizes (a guard zone after each
// scratch buffer must stay untouched), overwrite rules (outputs pre-filled
// with NaN), aliasing (in-place activation and crossentropy backwards),
// run-to-run determinism (bitwise) and, for grouped-query attention, that the
// forward is bitwise the multi-head one on the input with shared heads copied. Skips when no CUDA device is present; the arithmetic
// itself is also tested without a GPU in device_math_test.cpp.
// Built by meson where nvcc is found (the GPU suite: meson test --suite cuda).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/kernels.h"
#include "kernels/reference/reference_kernels.h"
#include "test_util.h"
#include "kernels/cuda/token_buckets.h"

namespace gpt2::cuda {
namespace {

using gpt2::testing::all_close;
using gpt2::testing::random_tokens;
using gpt2::testing::random_vec;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

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

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    check(cudaStreamCreate(&stream_), "cudaStreamCreate");
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

// ------------------------------------------------------------ encoder

TEST_F(CudaKernels, EncoderMatchesReferenceExactly) {
  const int B = 4, T = 64, C = 384, V = 50, N = B * T;
  auto tokens = random_tokens(N, V, 1);
  auto wte = random_vec(static_cast<size_t>(V) * C, 2), wpe = random_vec(static_cast<size_t>(T) * C, 3);
  auto dout = random_vec(static_cast<size_t>(N) * C, 4);
  auto dwte = random_vec(wte.size(), 5), dwpe = random_vec(wpe.size(), 6);
  std::vector<float> ref_out(dout.size());
  auto ref_dwte = dwte, ref_dwpe = dwpe;
  ref::encoder_forward(ref_out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  ref::encoder_backward(ref_dwte.data(), ref_dwpe.data(), dout.data(), tokens.data(), B, T, C);

  // Buckets as the host side of the backend builds them.
  const TokenBuckets tb = make_token_buckets(tokens.data(), N);

  DeviceArray<int32_t> d_tokens(tokens), d_bucket_token(tb.bucket_token), d_starts(tb.starts), d_order(tb.order);
  DeviceArray<float> d_wte(wte), d_wpe(wpe), d_out(dout.size(), NAN), d_dout(dout), d_dwte(dwte), d_dwpe(dwpe);
  encoder_forward(d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), N, T, C, stream_);
  encoder_backward_wpe(d_dwpe.get(), d_dout.get(), B, T, C, stream_);
  encoder_backward_wte(d_dwte.get(), d_dout.get(), d_bucket_token.get(), d_starts.get(), d_order.get(),
                       tb.num_buckets(), C, stream_);
  // Plain additions in the reference's order: bitwise equal.
  EXPECT_TRUE(all_close("encoder_forward", d_out.host(), ref_out, 0, 0));
  EXPECT_TRUE(all_close("encoder_backward dwpe", d_dwpe.host(), ref_dwpe, 0, 0));
  EXPECT_TRUE(all_close("encoder_backward dwte", d_dwte.host(), ref_dwte, 0, 0));
}

// ------------------------------------------------------------ layernorm

class CudaLayerNorm : public CudaKernels, public ::testing::WithParamInterface<int> {};

TEST_P(CudaLayerNorm, ForwardAndBackwardMatchReference) {
  const int N = 1000, C = GetParam();  // 4 row chunks of the column sums
  auto inp = random_vec(static_cast<size_t>(N) * C, 10, -2.0f, 3.0f);
  for (int c = 0; c < C; ++c) inp[c] *= 0.001f;  // variance below eps: eps matters
  auto weight = random_vec(C, 11), bias = random_vec(C, 12), dout = random_vec(inp.size(), 13);
  auto dinp = random_vec(inp.size(), 14), dweight = random_vec(C, 15), dbias = random_vec(C, 16);

  std::vector<float> ref_out(inp.size()), ref_mean(N), ref_rstd(N);
  ref::layernorm_forward(ref_out.data(), ref_mean.data(), ref_rstd.data(), inp.data(), weight.data(), bias.data(),
                         N, C);
  DeviceArray<float> d_inp(inp), d_weight(weight), d_bias(bias), d_out(inp.size(), NAN), d_mean(N, NAN),
      d_rstd(N, NAN);
  layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_weight.get(), d_bias.get(), N, C,
                    stream_);
  // Summation order and FMA: a few ulp of C-term sums (see device_math_test).
  EXPECT_TRUE(all_close("layernorm out", d_out.host(), ref_out, 1e-5, 1e-5));
  EXPECT_TRUE(all_close("layernorm mean", d_mean.host(), ref_mean, 1e-6, 1e-5));
  EXPECT_TRUE(all_close("layernorm rstd", d_rstd.host(), ref_rstd, 1e-6, 1e-5));

  auto mean = d_mean.host(), rstd = d_rstd.host();
  auto ref_dinp = to_double(dinp), ref_dweight = to_double(dweight), ref_dbias = to_double(dbias);
  ref::layernorm_backward(ref_dinp.data(), ref_dweight.data(), ref_dbias.data(), to_double(dout).data(),
                          to_double(inp).data(), to_double(weight).data(), to_double(mean).data(),
                          to_double(rstd).data(), N, C);
  std::vector<float> results[2][3];
  for (auto& run : results) {  // twice: bitwise the same
    DeviceArray<float> d_dout(dout), d_dinp(dinp), d_dweight(dweight), d_dbias(dbias);
    DeviceArray<float> scratch(layernorm_backward_scratch_floats(N, C), NAN);
    layernorm_backward(d_dinp.get(), d_dweight.get(), d_dbias.get(), scratch.get(), d_dout.get(), d_inp.get(),
                       d_weight.get(), d_mean.get(), d_rstd.get(), N, C, stream_);
    run[0] = d_dinp.host();
    run[1] = d_dweight.host();
    run[2] = d_dbias.host();
    EXPECT_TRUE(scratch.guard_intact()) << "layernorm_backward wrote past its scratch";
  }
  // Float against double: C-term row means (dinp) and N = 1000-term column
  // sums of |.| <~ 40 (dweight, dbias).
  EXPECT_TRUE(all_close("layernorm dinp", results[0][0], ref_dinp, 2e-5, 1e-5));
  EXPECT_TRUE(all_close("layernorm dweight", results[0][1], ref_dweight, 1e-4, 1e-5));
  EXPECT_TRUE(all_close("layernorm dbias", results[0][2], ref_dbias, 1e-4, 1e-5));
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(bitwise_equal(results[0][k], results[1][k])) << "output " << k;
}

INSTANTIATE_TEST_SUITE_P(Channels, CudaLayerNorm, ::testing::Values(384, 768, 100));

// ------------------------------------------------------------ bias

class CudaBias : public CudaKernels, public ::testing::WithParamInterface<int> {};

TEST_P(CudaBias, AddBiasAndBiasBackwardMatchReference) {
  const int N = 4096, OC = GetParam();
  auto out = random_vec(static_cast<size_t>(N) * OC, 20), bias = random_vec(OC, 21), dbias = random_vec(OC, 22);
  std::vector<float> expect(out);
  for (size_t i = 0; i < expect.size(); ++i) expect[i] += bias[i % OC];
  DeviceArray<float> d_out(out), d_bias(bias);
  add_bias(d_out.get(), d_bias.get(), N, OC, stream_);
  EXPECT_TRUE(all_close("add_bias", d_out.host(), expect, 0, 0));

  std::vector<double> ref_dbias = to_double(dbias);
  for (int r = 0; r < N; ++r) {
    for (int c = 0; c < OC; ++c) ref_dbias[c] += out[static_cast<size_t>(r) * OC + c];
  }
  DeviceArray<float> d_dout(out), d_dbias(dbias), scratch(bias_backward_scratch_floats(N, OC), NAN);
  bias_backward(d_dbias.get(), scratch.get(), d_dout.get(), N, OC, stream_);
  // N = 4096 float terms of |.| <= 1 against double.
  EXPECT_TRUE(all_close("bias_backward", d_dbias.host(), ref_dbias, 1e-4, 1e-5));
  EXPECT_TRUE(scratch.guard_intact()) << "bias_backward wrote past its scratch";
}

// 172 = V of the small config (float4 path), 2304 = 3C, 45 (scalar path).
INSTANTIATE_TEST_SUITE_P(Columns, CudaBias, ::testing::Values(172, 2304, 45));

// ------------------------------------------------------------ rmsnorm

class CudaRmsNorm : public CudaKernels, public ::testing::WithParamInterface<int> {};

TEST_P(CudaRmsNorm, ForwardAndBackwardMatchReference) {
  const int N = 1000, C = GetParam();  // 4 row chunks of the column sums
  auto inp = random_vec(static_cast<size_t>(N) * C, 17, -2.0f, 3.0f);
  for (int c = 0; c < C; ++c) inp[c] *= 0.001f;  // mean(x^2) below eps: eps matters
  auto weight = random_vec(C, 18), dout = random_vec(inp.size(), 19);
  auto dinp = random_vec(inp.size(), 23), dweight = random_vec(C, 24);

  std::vector<float> ref_out(inp.size()), ref_rstd(N);
  ref::rmsnorm_forward(ref_out.data(), ref_rstd.data(), inp.data(), weight.data(), N, C);
  DeviceArray<float> d_inp(inp), d_weight(weight), d_out(inp.size(), NAN), d_rstd(N, NAN);
  rmsnorm_forward(d_out.get(), d_rstd.get(), d_inp.get(), d_weight.get(), N, C, stream_);
  // Summation order and FMA: a few ulp of C-term sums (see device_math_test).
  EXPECT_TRUE(all_close("rmsnorm out", d_out.host(), ref_out, 1e-5, 1e-5));
  EXPECT_TRUE(all_close("rmsnorm rstd", d_rstd.host(), ref_rstd, 1e-6, 1e-5));

  auto rstd = d_rstd.host();
  auto ref_dinp = to_double(dinp), ref_dweight = to_double(dweight);
  ref::rmsnorm_backward(ref_dinp.data(), ref_dweight.data(), to_double(dout).data(), to_double(inp).data(),
                        to_double(weight).data(), to_double(rstd).data(), N, C);
  std::vector<float> results[2][2];
  for (auto& run : results) {  // twice: bitwise the same
    DeviceArray<float> d_dout(dout), d_dinp(dinp), d_dweight(dweight);
    DeviceArray<float> scratch(rmsnorm_backward_scratch_floats(N, C), NAN);
    rmsnorm_backward(d_dinp.get(), d_dweight.get(), scratch.get(), d_dout.get(), d_inp.get(), d_weight.get(),
                     d_rstd.get(), N, C, stream_);
    run[0] = d_dinp.host();
    run[1] = d_dweight.host();
    EXPECT_TRUE(scratch.guard_intact()) << "rmsnorm_backward wrote past its scratch";
  }
  // Float against double: C-term row means (dinp; row 0 has rstd ~ 300) and
  // N = 1000-term column sums of |.| <~ 40 (dweight).
  EXPECT_TRUE(all_close("rmsnorm dinp", results[0][0], ref_dinp, 2e-5, 1e-5));
  EXPECT_TRUE(all_close("rmsnorm dweight", results[0][1], ref_dweight, 1e-4, 1e-5));
  for (int k = 0; k < 2; ++k) EXPECT_TRUE(bitwise_equal(results[0][k], results[1][k])) << "output " << k;
}

INSTANTIATE_TEST_SUITE_P(Channels, CudaRmsNorm, ::testing::Values(384, 768, 100));

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

TEST_P(CudaAttention, ForwardDecodeAndBackwardMatchReference) {
  const Shape shape = GetParam();
  const auto [B, T, C, NH, KVH] = shape;
  const int64_t W = static_cast<int64_t>(NH + 2 * KVH) * (C / NH);
  auto qkv = random_vec(static_cast<size_t>(B) * T * W, 30 + T, -1.5f, 1.5f);
  auto dout = random_vec(static_cast<size_t>(B) * T * C, 31 + T);
  std::vector<double> ref_out(dout.size()), ref_lse(static_cast<size_t>(B) * NH * T), ref_dqkv(qkv.size());
  const auto qkv_d = to_double(qkv);
  ref::attention_forward(ref_out.data(), ref_lse.data(), qkv_d.data(), B, T, C, NH, KVH);
  ref::attention_backward(ref_dqkv.data(), to_double(dout).data(), qkv_d.data(), B, T, C, NH, KVH);

  DeviceArray<float> d_qkv(qkv), d_out(dout.size(), NAN), d_lse(ref_lse.size(), NAN);
  attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH, KVH, 0, stream_);
  auto out = d_out.host(), lse = d_lse.host();
  // Float with the device's expf (2 ulp) against double: a few ulp per term.
  EXPECT_TRUE(all_close("attention out", out, ref_out, 1e-5, 1e-5));
  EXPECT_TRUE(all_close("attention lse", lse, ref_lse, 1e-5, 1e-6));

  if (KVH != NH) {
    // Sharing key/value heads changes no arithmetic: bitwise the multi-head
    // kernel on the expanded input.
    DeviceArray<float> d_exp(expand_kv(qkv, shape)), d_mha(dout.size(), NAN), d_mha_lse(ref_lse.size(), NAN);
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
  EXPECT_TRUE(all_close("attention first_row", d_part.host(), expect, 0, 0));

  // Decode: batch row 0 alone, last query.
  std::vector<float> qkv0(qkv.begin(), qkv.begin() + static_cast<int64_t>(T) * W);
  std::vector<double> ref_dec(static_cast<size_t>(C));
  ref::attention_decode(ref_dec.data(), to_double(qkv0).data(), T, C, NH, KVH);
  DeviceArray<float> d_qkv0(qkv0), d_dec(static_cast<size_t>(C), NAN), d_dec_lse(static_cast<size_t>(NH), NAN);
  attention_forward(d_dec.get(), d_dec_lse.get(), d_qkv0.get(), 1, T, C, NH, KVH, T - 1, stream_);
  EXPECT_TRUE(all_close("attention decode", d_dec.host(), ref_dec, 1e-5, 1e-5));

  std::vector<float> dqkv[2];
  for (auto& run : dqkv) {
    DeviceArray<float> d_dout(dout), d_dqkv(qkv.size(), NAN), scratch(attention_backward_scratch_floats(B, T, NH), NAN);
    attention_backward(d_dqkv.get(), scratch.get(), d_dout.get(), d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH,
                       KVH, stream_);
    run = d_dqkv.host();
    EXPECT_TRUE(scratch.guard_intact()) << "attention_backward wrote past its scratch";
    EXPECT_TRUE(d_dqkv.guard_intact()) << "attention_backward wrote past dqkv";
  }
  // Sums over up to T products of O(1) terms, float against double; a
  // key/value head sums G = NH / KVH query heads' terms.
  const double G = static_cast<double>(NH / KVH);
  EXPECT_TRUE(all_close("attention dqkv", dqkv[0], ref_dqkv, 5e-5 * G, 1e-4 * G));
  EXPECT_TRUE(bitwise_equal(dqkv[0], dqkv[1])) << "attention_backward is not deterministic";
}

// The model's two configs (HS = 64; T = 1024 for the larger) and HS = 32, 96,
// 128 (every kernel instantiation), T off the 32-row chunks; then grouped
// query heads: G = 4 (HS 32), G = 3 (HS 64), and one key/value head (HS 128).
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

class CudaRope : public CudaKernels, public ::testing::WithParamInterface<Shape> {};

TEST_P(CudaRope, ForwardAndBackwardMatchReference) {
  const auto [B, T, C, NH, KVH] = GetParam();
  const int HS = C / NH, pos0 = 7;
  const float theta = 10000.0f;
  const auto qkv = random_vec(static_cast<size_t>(B) * T * (NH + 2 * KVH) * HS, 32 + T, -2.0f, 2.0f);
  auto ref_fwd = qkv;
  ref::rope_forward(ref_fwd.data(), B, T, NH, KVH, HS, pos0, theta);
  auto ref_bwd = qkv;
  ref::rope_backward(ref_bwd.data(), B, T, NH, KVH, HS, pos0, theta);
  DeviceArray<float> d_fwd(qkv), d_bwd(qkv);
  rope(d_fwd.get(), B, T, NH, KVH, HS, pos0, theta, false, stream_);
  rope(d_bwd.get(), B, T, NH, KVH, HS, pos0, theta, true, stream_);
  // The same float (cos, sin) (double math on both sides, rounded to float);
  // the device may fuse the rotation's multiply-add: an ulp of |.| <~ 3.
  // Value heads are copied through untouched, so exact there.
  EXPECT_TRUE(all_close("rope_forward", d_fwd.host(), ref_fwd, 1e-6, 1e-6));
  EXPECT_TRUE(all_close("rope_backward", d_bwd.host(), ref_bwd, 1e-6, 1e-6));
  EXPECT_TRUE(d_fwd.guard_intact()) << "rope wrote past qkv";
}

// Multi-head at the model's size (T = 1024, positions 7..1030), grouped,
// multi-query, and HS = 6 (not a multiple of 4).
INSTANTIATE_TEST_SUITE_P(Shapes, CudaRope,
                         ::testing::Values(Shape{2, 1024, 768, 12, 12}, Shape{2, 77, 256, 8, 2},
                                           Shape{1, 50, 512, 4, 1}, Shape{3, 9, 24, 4, 2}));

// ------------------------------------------------------------ elementwise

TEST_F(CudaKernels, GeluAndResidualMatchReference) {
  const int64_t n = 100003;  // not a multiple of 4: the float4 path's tail
  auto inp = random_vec(n + 1, 40, -6.0f, 6.0f), dout = random_vec(n + 1, 41), other = random_vec(n + 1, 42);
  for (int offset = 0; offset < 2; ++offset) {  // offset 1: misaligned, the scalar path
    const std::vector<float> x(inp.begin() + offset, inp.begin() + offset + n);
    const std::vector<float> d(dout.begin() + offset, dout.begin() + offset + n);
    const std::vector<float> y(other.begin() + offset, other.begin() + offset + n);
    std::vector<float> ref_out(n), ref_dinp(n), ref_sum(n);
    ref::gelu_forward(ref_out.data(), x.data(), n);
    ref::gelu_backward(ref_dinp.data(), d.data(), x.data(), n);
    ref::residual_forward(ref_sum.data(), x.data(), y.data(), n);
    DeviceArray<float> d_inp(inp), d_dout(dout), d_other(other), d_out(n + 1, NAN);
    gelu_forward(d_out.get() + offset, d_inp.get() + offset, n, stream_);
    auto out = d_out.host();
    // tanhf on the device is within 2 ulp; outputs |.| <~ 6.
    EXPECT_TRUE(all_close("gelu_forward", out.data() + offset, ref_out.data(), n, 2e-6, 2e-6)) << offset;
    gelu_backward(d_dout.get() + offset, d_dout.get() + offset, d_inp.get() + offset, n, stream_);  // in place
    auto dinp = d_dout.host();
    EXPECT_TRUE(all_close("gelu_backward", dinp.data() + offset, ref_dinp.data(), n, 2e-6, 2e-6)) << offset;
    residual_forward(d_out.get() + offset, d_inp.get() + offset, d_other.get() + offset, n, stream_);
    out = d_out.host();
    EXPECT_TRUE(all_close("residual", out.data() + offset, ref_sum.data(), n, 0, 0)) << offset;
  }
}

TEST_F(CudaKernels, ReluAndSiluMatchReference) {
  const int64_t n = 100003;  // not a multiple of 4: the float4 path's tail
  auto inp = random_vec(n + 1, 43, -6.0f, 6.0f), dout = random_vec(n + 1, 44);
  inp[10] = 0.0f;  // ReLU's kink (gradient 0)
  inp[11] = -100.0f;  // expf overflows: SiLU -> -0
  for (int offset = 0; offset < 2; ++offset) {  // offset 1: misaligned, the scalar path
    const std::vector<float> x(inp.begin() + offset, inp.begin() + offset + n);
    const std::vector<float> d(dout.begin() + offset, dout.begin() + offset + n);
    std::vector<float> ref_relu(n), ref_drelu(n), ref_silu(n), ref_dsilu(n);
    ref::relu_forward(ref_relu.data(), x.data(), n);
    ref::relu_backward(ref_drelu.data(), d.data(), x.data(), n);
    ref::silu_forward(ref_silu.data(), x.data(), n);
    ref::silu_backward(ref_dsilu.data(), d.data(), x.data(), n);
    DeviceArray<float> d_inp(inp), d_out(n + 1, NAN);
    relu_forward(d_out.get() + offset, d_inp.get() + offset, n, stream_);
    auto out = d_out.host();
    EXPECT_TRUE(all_close("relu_forward", out.data() + offset, ref_relu.data(), n, 0, 0)) << offset;
    {
      DeviceArray<float> d_dout(dout);  // in place: dinp aliases dout
      relu_backward(d_dout.get() + offset, d_dout.get() + offset, d_inp.get() + offset, n, stream_);
      auto dinp = d_dout.host();
      EXPECT_TRUE(all_close("relu_backward", dinp.data() + offset, ref_drelu.data(), n, 0, 0)) << offset;
    }
    silu_forward(d_out.get() + offset, d_inp.get() + offset, n, stream_);
    out = d_out.host();
    // expf on the device is within 2 ulp; |out| <~ 6, |grad| <~ 1.1.
    EXPECT_TRUE(all_close("silu_forward", out.data() + offset, ref_silu.data(), n, 2e-6, 2e-6)) << offset;
    {
      DeviceArray<float> d_dout(dout), d_x(inp);  // in place: dinp aliases inp
      silu_backward(d_x.get() + offset, d_dout.get() + offset, d_x.get() + offset, n, stream_);
      auto dinp = d_x.host();
      EXPECT_TRUE(all_close("silu_backward", dinp.data() + offset, ref_dsilu.data(), n, 2e-6, 2e-6)) << offset;
    }
  }
}

class CudaSwiglu : public CudaKernels, public ::testing::WithParamInterface<int> {};

TEST_P(CudaSwiglu, ForwardAndBackwardMatchReference) {
  const int N = 256, H = GetParam();
  auto inp = random_vec(static_cast<size_t>(N) * 2 * H, 45, -6.0f, 6.0f);
  auto dout = random_vec(static_cast<size_t>(N) * H, 46);
  std::vector<float> ref_out(dout.size()), ref_dinp(inp.size());
  ref::swiglu_forward(ref_out.data(), inp.data(), N, H);
  ref::swiglu_backward(ref_dinp.data(), dout.data(), inp.data(), N, H);
  DeviceArray<float> d_inp(inp), d_dout(dout), d_out(dout.size(), NAN), d_dinp(inp.size(), NAN);
  swiglu_forward(d_out.get(), d_inp.get(), N, H, stream_);
  swiglu_backward(d_dinp.get(), d_dout.get(), d_inp.get(), N, H, stream_);
  // expf within 2 ulp and a few products in another order (|.| <~ 40).
  EXPECT_TRUE(all_close("swiglu_forward", d_out.host(), ref_out, 2e-6, 2e-6));
  EXPECT_TRUE(all_close("swiglu_backward", d_dinp.host(), ref_dinp, 2e-6, 2e-6));
  EXPECT_TRUE(d_out.guard_intact() && d_dinp.guard_intact()) << "swiglu wrote past its output";
}

// 4C of the small model (1536), 8/3 of it rounded (1024), and an odd width.
INSTANTIATE_TEST_SUITE_P(Hidden, CudaSwiglu, ::testing::Values(1536, 1024, 37));

// ------------------------------------------------------------ crossentropy

class CudaCrossEntropy : public CudaKernels, public ::testing::WithParamInterface<int> {};

TEST_P(CudaCrossEntropy, ForwardAndBackwardMatchReference) {
  const int N = 64, V = GetParam();
  auto logits = random_vec(static_cast<size_t>(N) * V, 50 + V, -8.0f, 8.0f);
  auto targets = random_tokens(N, V, 51);
  const float dloss = 1.0f / N;
  std::vector<double> ref_losses(N), ref_dlogits(logits.size());
  const auto logits_d = to_double(logits);
  ref::crossentropy_forward(ref_losses.data(), logits_d.data(), targets.data(), N, V);
  ref::crossentropy_backward(ref_dlogits.data(), logits_d.data(), targets.data(), double(dloss), N, V);
  DeviceArray<float> d_logits(logits), d_losses(N, NAN);
  DeviceArray<int32_t> d_targets(targets);
  crossentropy_forward(d_losses.get(), d_logits.get(), d_targets.get(), N, V, stream_);
  crossentropy_backward(d_logits.get(), d_logits.get(), d_targets.get(), dloss, N, V, stream_);  // in place
  // Float sums of V exp terms against double: relative ~sqrt(V) 2^-24.
  EXPECT_TRUE(all_close("crossentropy losses", d_losses.host(), ref_losses, 2e-5, 1e-5));
  EXPECT_TRUE(all_close("crossentropy dlogits", d_logits.host(), ref_dlogits, 1e-8, 1e-4));
}

INSTANTIATE_TEST_SUITE_P(Vocab, CudaCrossEntropy, ::testing::Values(172, 31, 50304));

// ------------------------------------------------------------ adam

TEST_F(CudaKernels, AdamMatchesReferenceWithinRounding) {
  const int64_t n = (1 << 20) + 3;
  auto param = random_vec(n, 60), m = random_vec(n, 61, -0.01f, 0.01f), v = random_vec(n, 62, 0.0f, 1e-4f);
  auto grad = random_vec(n, 63);
  AdamCoefficients k;
  k.step_size = 3e-4f;
  k.v_scale = 1.7f;
  k.decay_factor = 0.9999f;
  k.grad_scale = 0.8f;
  auto ref_param = param, ref_m = m, ref_v = v;
  ref::adam_update(ref_param.data(), grad.data(), ref_m.data(), ref_v.data(), n, k.beta1, k.beta2, k.eps,
                   k.step_size, k.v_scale, k.decay_factor, k.grad_scale);
  DeviceArray<float> d_param(param), d_grad(grad), d_m(m), d_v(v);
  adam_update(d_param.get(), d_grad.get(), d_m.get(), d_v.get(), n, k, stream_);
  // The kernel rounds every operation on its own (no FMA); the host reference
  // may fuse a multiply-add (-march=native): two units in the last place of
  // the terms (m and the parameter may cancel).
  EXPECT_TRUE(all_close("adam param", d_param.host(), ref_param, 2.4e-7, 2.4e-7));
  EXPECT_TRUE(all_close("adam m", d_m.host(), ref_m, 5e-8, 2.4e-7));
  EXPECT_TRUE(all_close("adam v", d_v.host(), ref_v, 1e-30, 2.4e-7));
}

// ------------------------------------------------------------ reduce

TEST_F(CudaKernels, ReduceSumMatchesReference) {
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{10'000'019}}) {
    auto x = random_vec(static_cast<size_t>(n), 70, -3.0f, 3.0f);
    const double ref_sq = ref::sum_squares(x.data(), n);
    const double ref_plain = std::accumulate(x.begin(), x.end(), 0.0);
    double sum_abs = 0.0;
    for (float xi : x) sum_abs += std::fabs(xi);
    // The reference adds n doubles in a row: its own error can reach
    // n * 2^-53 of the sum of magnitudes (seen: 2.6e-12 relative at n = 1e7
    // on an H100); the device's tree order is the more accurate one.
    const double rel = static_cast<double>(n) * std::ldexp(1.0, -53);
    DeviceArray<float> d_x(x);
    DeviceArray<double> result(1, NAN), scratch(reduce_scratch_doubles(), NAN);
    reduce_sum(result.get(), scratch.get(), d_x.get(), n, true, stream_);
    const double sq = result.host()[0];
    EXPECT_NEAR(sq, ref_sq, rel * ref_sq) << "n = " << n;
    reduce_sum(result.get(), scratch.get(), d_x.get(), n, true, stream_);
    EXPECT_EQ(result.host()[0], sq) << "reduce_sum is not deterministic";
    reduce_sum(result.get(), scratch.get(), d_x.get(), n, false, stream_);
    EXPECT_NEAR(result.host()[0], ref_plain, rel * sum_abs) << "n = " << n;
    EXPECT_TRUE(scratch.guard_intact()) << "reduce_sum wrote past its scratch";
  }
}

}  // namespace
}  // namespace gpt2::cuda

// Without a CUDA device the whole program reports itself skipped (exit 77,
// which meson test shows as SKIP) with the reason.
int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    std::printf("SKIP: no CUDA device (%s)\n", rc != cudaSuccess ? cudaGetErrorString(rc) : "none found");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
