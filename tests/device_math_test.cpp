// Host tests of the CUDA kernels' arithmetic (core/kernels/cuda/device_math.h).
// CUDA code cannot run on the build machines, so each kernel of kernels.cu
// and attention.cu is rebuilt here on the host: the same device_math.h
// functions, the same launch constants, and the same ownership and summation
// order (lanes of a warp, the xor butterfly, row chunks of the column sums,
// blocks of the reduction, tiles of attention). Each host path is then held
// to the naive reference kernels on random inputs, or, for RMSNorm, RoPE and
// the ReLU/SiLU/SwiGLU activations, to backend.h's formulas written out in
// double here; grouped-query attention to the multi-head reference on the
// input with each key/value head repeated for its group. Where the kernel adds in
// the reference's order the comparison is exact; elsewhere the tolerance is
// stated next to it. What this does not check: the kernels' memory indexing,
// FMA contraction on the device (rounding-level differences) and the CUDA
// math library's expf/tanhf/logf (a few ulp); cuda_kernels_test.cpp checks
// those on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cuda/device_math.h"
#include "kernels/reference/reference_kernels.h"
#include "test_util.h"
#include "kernels/cuda/token_buckets.h"

namespace gpt2::cuda {
namespace {

using dm::kWarpSize;
using gpt2::testing::all_close;
using gpt2::testing::random_tokens;
using gpt2::testing::random_vec;

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Lane-strided partials of a row (lane l takes l, l+32, ... in order) folded
// by the butterfly: the warp-per-row reduction of the kernels.
template <typename F, typename Op>
float warp_row_reduce(int n, float init, F term, Op op) {
  float lanes[kWarpSize];
  for (int l = 0; l < kWarpSize; ++l) {
    lanes[l] = init;
    for (int c = l; c < n; c += kWarpSize) lanes[l] = op(lanes[l], term(c));
  }
  return dm::warp_butterfly(lanes, op);
}

// ------------------------------------------------------------ warp order

TEST(DeviceMath, ButterflyLeavesEveryLaneWithTheSameSum) {
  std::vector<float> v = random_vec(kWarpSize, 1, -100.0f, 100.0f);
  float lanes[kWarpSize];
  std::copy(v.begin(), v.end(), lanes);
  const float total = dm::warp_butterfly(lanes, dm::SumOp{});
  for (int l = 0; l < kWarpSize; ++l) EXPECT_EQ(lanes[l], total) << "lane " << l;
  EXPECT_NEAR(total, std::accumulate(v.begin(), v.end(), 0.0), 1e-3);
  // Integers are summed exactly: any lost or doubled lane shows.
  for (int l = 0; l < kWarpSize; ++l) lanes[l] = static_cast<float>(l * l);
  EXPECT_EQ(dm::warp_butterfly(lanes, dm::SumOp{}), 10416.0f);
  for (int l = 0; l < kWarpSize; ++l) lanes[l] = static_cast<float>((l * 7) % 32);
  EXPECT_EQ(dm::warp_butterfly(lanes, dm::MaxOp{}), 31.0f);
}

// The butterfly's order: round 16 pairs lane l with l+16, and so on down.
TEST(DeviceMath, ButterflyOrderIsTheXorTree) {
  float lanes[kWarpSize];
  std::vector<float> v = random_vec(kWarpSize, 2, -1.0f, 1.0f);
  for (int l = 0; l < kWarpSize; ++l) lanes[l] = v[l] * std::pow(10.0f, static_cast<float>(l % 7));
  float expect[kWarpSize];
  std::copy(std::begin(lanes), std::end(lanes), expect);
  for (int width = kWarpSize / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) expect[l] = expect[l] + expect[l + width];
  }
  EXPECT_EQ(dm::warp_butterfly(lanes, dm::SumOp{}), expect[0]);
}

// ------------------------------------------------------------ encoder

// `masked`: every third token id -1 (another vocabulary shard's token): the
// position row alone forward, in no bucket backward.
TEST(DeviceMath, EncoderForwardAndBackwardMatchReferenceExactly) {
  for (const bool masked : {false, true}) {
  SCOPED_TRACE(masked ? "masked ids" : "all ids");
  const int B = 2, T = 9, C = 40, V = 7;  // V small so that tokens repeat
  const int N = B * T;
  auto tokens = random_tokens(N, V, 3);
  if (masked) {
    for (int n = 0; n < N; n += 3) tokens[n] = -1;
  }
  auto wte = random_vec(static_cast<size_t>(V) * C, 4), wpe = random_vec(static_cast<size_t>(T) * C, 5);
  std::vector<float> out(static_cast<size_t>(N) * C), ref_out(out.size());
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) {
      const float pe = wpe[(n % T) * C + c];
      out[n * C + c] = tokens[n] < 0 ? pe : wte[tokens[n] * C + c] + pe;  // the kernel's expression
    }
  }
  ref::encoder_forward(ref_out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  EXPECT_TRUE(all_close("encoder_forward", out, ref_out, 0, 0));

  auto dout = random_vec(out.size(), 6);
  auto dwte = random_vec(wte.size(), 7), dwpe = random_vec(wpe.size(), 8);
  auto ref_dwte = dwte, ref_dwpe = dwpe;
  ref::encoder_backward(ref_dwte.data(), ref_dwpe.data(), dout.data(), tokens.data(), B, T, C);
  // wpe: per (t, c), start from dwpe and add batch rows in order.
  for (int i = 0; i < T * C; ++i) {
    float acc = dwpe[i];
    for (int b = 0; b < B; ++b) acc += dout[b * T * C + i];
    dwpe[i] = acc;
  }
  // wte: the buckets the host builds (positions stably sorted by token).
  const TokenBuckets tb = make_token_buckets(tokens.data(), N);
  for (int bucket = 0; bucket < tb.num_buckets(); ++bucket) {
    for (int c = 0; c < C; ++c) {
      float acc = dwte[tb.bucket_token[bucket] * C + c];
      for (int k = tb.starts[bucket]; k < tb.starts[bucket + 1]; ++k) acc += dout[tb.order[k] * C + c];
      dwte[tb.bucket_token[bucket] * C + c] = acc;
    }
  }
  // Same additions in the same order as the reference: bitwise equal.
  EXPECT_TRUE(all_close("encoder_backward dwpe", dwpe, ref_dwpe, 0, 0));
  EXPECT_TRUE(all_close("encoder_backward dwte", dwte, ref_dwte, 0, 0));
  }
}

// ------------------------------------------------------------ layernorm

void layernorm_forward_host(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, int N, int C) {
  for (int row = 0; row < N; ++row) {
    const float* x = inp + static_cast<int64_t>(row) * C;
    const float m = warp_row_reduce(C, 0.0f, [&](int c) { return x[c]; }, dm::SumOp{}) / static_cast<float>(C);
    const float sq = warp_row_reduce(C, 0.0f, [&](int c) { return (x[c] - m) * (x[c] - m); }, dm::SumOp{});
    const float s = dm::layernorm_rstd(sq, C);
    for (int c = 0; c < C; ++c) out[row * C + c] = dm::layernorm_out(x[c], m, s, weight[c], bias[c]);
    mean[row] = m;
    rstd[row] = s;
  }
}

// The two column-sum stages of kernels.cu: block (32 columns x 8 rows) per
// chunk of kColumnChunkRows rows, then a pass over the chunks.
// term(r, c) is the summand; sum[c] += the column total.
template <typename F>
void column_sums_host(float* sum, int N, int C, F term) {
  const int chunks = dm::column_chunks(N);
  std::vector<float> partial(static_cast<size_t>(chunks) * C);
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int row_end = std::min(N, (chunk + 1) * dm::kColumnChunkRows);
    for (int c = 0; c < C; ++c) {
      float tile[dm::kColumnTileRows];
      for (int y = 0; y < dm::kColumnTileRows; ++y) {
        tile[y] = 0.0f;
        for (int r = chunk * dm::kColumnChunkRows + y; r < row_end; r += dm::kColumnTileRows) tile[y] += term(r, c);
      }
      float acc = tile[0];
      for (int y = 1; y < dm::kColumnTileRows; ++y) acc += tile[y];
      partial[static_cast<size_t>(chunk) * C + c] = acc;
    }
  }
  for (int c = 0; c < C; ++c) {
    float acc = 0.0f;
    for (int k = 0; k < chunks; ++k) acc += partial[static_cast<size_t>(k) * C + c];
    sum[c] += acc;
  }
}

TEST(DeviceMath, LayerNormForwardMatchesReference) {
  const int N = 37, C = 96;
  auto inp = random_vec(static_cast<size_t>(N) * C, 10, -2.0f, 3.0f);  // mean away from 0
  // Row 0 small (variance ~3e-7 < eps): there eps shapes rstd. Centred on 0
  // so the mean carries no rounding that rstd ~ 300 would amplify.
  for (int c = 0; c < C; ++c) inp[c] = 0.001f * inp[c];
  auto weight = random_vec(C, 11), bias = random_vec(C, 12);
  std::vector<float> out(inp.size()), mean(N), rstd(N), ref_out(inp.size()), ref_mean(N), ref_rstd(N);
  layernorm_forward_host(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
  ref::layernorm_forward(ref_out.data(), ref_mean.data(), ref_rstd.data(), inp.data(), weight.data(), bias.data(),
                         N, C);
  // Only the summation order differs: a few ulp of a sum of C = 96 terms
  // (~C * 2^-24 relative), carried through rstd (~1) into |out| <~ 5.
  EXPECT_TRUE(all_close("layernorm mean", mean, ref_mean, 1e-6, 1e-5));
  EXPECT_TRUE(all_close("layernorm rstd", rstd, ref_rstd, 1e-6, 1e-5));
  EXPECT_TRUE(all_close("layernorm out", out, ref_out, 2e-6, 1e-5));
}

TEST(DeviceMath, LayerNormBackwardMatchesReference) {
  const int N = 600, C = 72;  // 3 row chunks; C not a multiple of 32 (a partial column tile)
  auto inp = random_vec(static_cast<size_t>(N) * C, 20, -2.0f, 3.0f);
  for (int c = 0; c < C; ++c) inp[c] = 0.001f * inp[c];  // variance below eps, as above
  auto weight = random_vec(C, 21), bias = random_vec(C, 22), dout = random_vec(inp.size(), 23);
  std::vector<float> out(inp.size()), mean(N), rstd(N);
  layernorm_forward_host(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
  auto dinp = random_vec(inp.size(), 24), dweight = random_vec(C, 25), dbias = random_vec(C, 26);
  auto ref_dinp = to_double(dinp), ref_dweight = to_double(dweight), ref_dbias = to_double(dbias);

  // Kernel 1: warp per row, dinp +=.
  for (int row = 0; row < N; ++row) {
    const float* x = inp.data() + row * C;
    const float* d = dout.data() + row * C;
    const float m = mean[row], s = rstd[row];
    const float g_mean =
        warp_row_reduce(C, 0.0f, [&](int c) { return d[c] * weight[c]; }, dm::SumOp{}) / static_cast<float>(C);
    const float gx_mean =
        warp_row_reduce(C, 0.0f, [&](int c) { return d[c] * weight[c] * ((x[c] - m) * s); }, dm::SumOp{}) /
        static_cast<float>(C);
    for (int c = 0; c < C; ++c) {
      dinp[row * C + c] += dm::layernorm_dinp(d[c] * weight[c], (x[c] - m) * s, s, g_mean, gx_mean);
    }
  }
  // Kernels 2 and 3: column sums of dout * xhat and dout.
  column_sums_host(dweight.data(), N, C,
                   [&](int r, int c) { return (inp[r * C + c] - mean[r]) * rstd[r] * dout[r * C + c]; });
  column_sums_host(dbias.data(), N, C, [&](int r, int c) { return dout[r * C + c]; });

  ref::layernorm_backward(ref_dinp.data(), ref_dweight.data(), ref_dbias.data(), to_double(dout).data(),
                          to_double(inp).data(), to_double(weight).data(), to_double(mean).data(),
                          to_double(rstd).data(), N, C);
  // Against double: float rounding of C = 72-term row means (dinp, |.| <~ 5)
  // and of N = 600-term column sums (|.| <~ 30, error <~ N * 2^-24 * 30).
  EXPECT_TRUE(all_close("layernorm dinp", dinp, ref_dinp, 1e-5, 1e-5));
  EXPECT_TRUE(all_close("layernorm dweight", dweight, ref_dweight, 2e-5, 1e-5));
  EXPECT_TRUE(all_close("layernorm dbias", dbias, ref_dbias, 2e-5, 1e-5));
}

// ------------------------------------------------------------ rmsnorm

// rmsnorm_forward_kernel: warp per row, the sum of squares by the lanes and
// the butterfly.
void rmsnorm_forward_host(float* out, float* rstd, const float* inp, const float* weight, int N, int C) {
  for (int row = 0; row < N; ++row) {
    const float* x = inp + static_cast<int64_t>(row) * C;
    const float s = dm::rmsnorm_rstd(warp_row_reduce(C, 0.0f, [&](int c) { return x[c] * x[c]; }, dm::SumOp{}), C);
    for (int c = 0; c < C; ++c) out[row * C + c] = dm::rmsnorm_out(x[c], s, weight[c]);
    rstd[row] = s;
  }
}

// The formulas of backend.h in double: rstd = 1 / sqrt(mean(x^2) + 1e-5),
// out = x rstd w; dinp += rstd g - x rstd^3 mean(g x) with g = dout w,
// dweight += sum over rows of dout x rstd.
void rmsnorm_forward_formula(double* out, double* rstd, const float* inp, const float* weight, int N, int C) {
  for (int row = 0; row < N; ++row) {
    const float* x = inp + static_cast<int64_t>(row) * C;
    double sq = 0.0;
    for (int c = 0; c < C; ++c) sq += static_cast<double>(x[c]) * x[c];
    rstd[row] = 1.0 / std::sqrt(sq / C + 1e-5);
    for (int c = 0; c < C; ++c) out[row * C + c] = x[c] * rstd[row] * weight[c];
  }
}

TEST(DeviceMath, RmsNormForwardMatchesFormula) {
  const int N = 37, C = 96;
  auto inp = random_vec(static_cast<size_t>(N) * C, 13, -2.0f, 3.0f);
  for (int c = 0; c < C; ++c) inp[c] = 0.001f * inp[c];  // row 0: mean(x^2) ~ 3e-6 < eps, eps matters
  auto weight = random_vec(C, 14);
  std::vector<float> out(inp.size()), rstd(N);
  std::vector<double> ref_out(inp.size()), ref_rstd(N);
  rmsnorm_forward_host(out.data(), rstd.data(), inp.data(), weight.data(), N, C);
  rmsnorm_forward_formula(ref_out.data(), ref_rstd.data(), inp.data(), weight.data(), N, C);
  // One float sum of C = 96 squares (~C 2^-24 relative at worst), a sqrt
  // and a division; out <~ 3 in magnitude.
  EXPECT_TRUE(all_close("rmsnorm rstd", rstd, ref_rstd, 1e-6, 1e-5));
  EXPECT_TRUE(all_close("rmsnorm out", out, ref_out, 2e-6, 1e-5));
}

TEST(DeviceMath, RmsNormBackwardMatchesFormula) {
  const int N = 600, C = 72;  // 3 row chunks; C not a multiple of 32 (a partial column tile)
  auto inp = random_vec(static_cast<size_t>(N) * C, 27, -2.0f, 3.0f);
  for (int c = 0; c < C; ++c) inp[c] = 0.001f * inp[c];
  auto weight = random_vec(C, 28), dout = random_vec(inp.size(), 29);
  std::vector<float> out(inp.size()), rstd(N);
  rmsnorm_forward_host(out.data(), rstd.data(), inp.data(), weight.data(), N, C);
  auto dinp = random_vec(inp.size(), 35), dweight = random_vec(C, 36);
  auto ref_dinp = to_double(dinp), ref_dweight = to_double(dweight);

  // Kernel 1: warp per row, dinp +=.
  for (int row = 0; row < N; ++row) {
    const float* x = inp.data() + row * C;
    const float* d = dout.data() + row * C;
    const float s = rstd[row];
    const float gx_mean =
        warp_row_reduce(C, 0.0f, [&](int c) { return d[c] * weight[c] * (x[c] * s); }, dm::SumOp{}) /
        static_cast<float>(C);
    for (int c = 0; c < C; ++c) dinp[row * C + c] += dm::rmsnorm_dinp(d[c] * weight[c], x[c] * s, s, gx_mean);
  }
  // Kernels 2 and 3: column sums of dout * x * rstd.
  column_sums_host(dweight.data(), N, C, [&](int r, int c) { return inp[r * C + c] * rstd[r] * dout[r * C + c]; });

  // The formula in double, from the same (float) rstd.
  for (int row = 0; row < N; ++row) {
    const double s = rstd[row];
    double gx = 0.0;
    for (int c = 0; c < C; ++c) gx += static_cast<double>(dout[row * C + c]) * weight[c] * inp[row * C + c];
    const double gx_mean = gx / C;
    for (int c = 0; c < C; ++c) {
      const double x = inp[row * C + c], g = static_cast<double>(dout[row * C + c]) * weight[c];
      ref_dinp[row * C + c] += s * g - x * s * s * s * gx_mean;
      ref_dweight[c] += static_cast<double>(dout[row * C + c]) * x * s;
    }
  }
  // Float against double: C = 72-term row means carried through rstd
  // (row 0: rstd ~ 300, its dinp terms |.| <~ 300), N = 600-term column sums.
  EXPECT_TRUE(all_close("rmsnorm dinp", dinp, ref_dinp, 1e-5, 1e-5));
  EXPECT_TRUE(all_close("rmsnorm dweight", dweight, ref_dweight, 2e-5, 1e-5));
}

// ------------------------------------------------------------ bias

TEST(DeviceMath, AddBiasAndBiasBackwardMatchReference) {
  const int N = 530, C = 6, OC = 45;
  auto inp = random_vec(static_cast<size_t>(N) * C, 30), weight = random_vec(static_cast<size_t>(OC) * C, 31);
  auto bias = random_vec(OC, 32);
  // add_bias after the bias-less product equals the product with bias up to
  // one rounding of the C = 6-term dot product (|.| <~ 7).
  std::vector<float> out(static_cast<size_t>(N) * OC), ref_out(out.size());
  ref::matmul_forward(out.data(), inp.data(), weight.data(), static_cast<const float*>(nullptr), N, C, OC);
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) out[i] += bias[i % OC];
  ref::matmul_forward(ref_out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  EXPECT_TRUE(all_close("add_bias", out, ref_out, 2e-6, 1e-6));

  auto dout = random_vec(out.size(), 33);
  auto dbias = random_vec(OC, 34);
  auto ref_dbias = to_double(dbias);
  std::vector<double> dinp(static_cast<size_t>(N) * C), dweight(static_cast<size_t>(OC) * C);
  ref::matmul_backward(dinp.data(), dweight.data(), ref_dbias.data(), to_double(dout).data(), to_double(inp).data(),
                       to_double(weight).data(), N, C, OC);
  column_sums_host(dbias.data(), N, OC, [&](int r, int c) { return dout[r * OC + c]; });
  // N = 530 terms in float against double: |sum| <~ 25.
  EXPECT_TRUE(all_close("bias_backward", dbias, ref_dbias, 1e-5, 1e-5));
}

// ------------------------------------------------------------ attention

// NH query heads over KVH key/value heads (KVH = NH: plain multi-head).
struct Shape {
  int B, T, C, NH, KVH;
  int HS() const { return C / NH; }
  int W() const { return (NH + 2 * KVH) * HS(); }  // qkv row width
  size_t qkv_size() const { return static_cast<size_t>(B) * T * W(); }
};

// Query head h (part 0), key head h (1) or value head h (2) at (b, t): the
// layout of attention.cu's QkvHeads.
const float* qkv_row(const float* qkv, int part, int b, int t, int h, const Shape& s) {
  const int first = part == 0 ? 0 : part == 1 ? s.NH : s.NH + s.KVH;
  return qkv + (static_cast<int64_t>(b) * s.T + t) * s.W() + (first + h) * s.HS();
}
float* qkv_row(float* qkv, int part, int b, int t, int h, const Shape& s) {
  return const_cast<float*>(qkv_row(static_cast<const float*>(qkv), part, b, t, h, s));
}

// The (B,T,3C) multi-head input equivalent to a grouped one: each query head
// gets its own copy of its group's key and value heads.
template <typename R>
std::vector<R> expand_kv(const std::vector<float>& qkv, const Shape& s) {
  const int HS = s.HS(), G = s.NH / s.KVH;
  std::vector<R> out(static_cast<size_t>(s.B) * s.T * 3 * s.C);
  for (int b = 0; b < s.B; ++b) {
    for (int t = 0; t < s.T; ++t) {
      R* row = out.data() + (static_cast<int64_t>(b) * s.T + t) * 3 * s.C;
      for (int part = 0; part < 3; ++part) {
        for (int h = 0; h < s.NH; ++h) {
          const float* src = qkv_row(qkv.data(), part, b, t, part == 0 ? h : h / G, s);
          std::copy(src, src + HS, row + part * s.C + h * HS);
        }
      }
    }
  }
  return out;
}

// Back from the expanded layout's gradient: dq as it is, a key/value head's
// dk and dv the sum of its group's copies (in double).
std::vector<double> reduce_kv(const std::vector<double>& dexp, const Shape& s) {
  const int HS = s.HS(), G = s.NH / s.KVH;
  std::vector<double> out(s.qkv_size(), 0.0);
  for (int b = 0; b < s.B; ++b) {
    for (int t = 0; t < s.T; ++t) {
      const double* row = dexp.data() + (static_cast<int64_t>(b) * s.T + t) * 3 * s.C;
      double* dst = out.data() + (static_cast<int64_t>(b) * s.T + t) * s.W();
      for (int part = 0; part < 3; ++part) {
        const int first = part == 0 ? 0 : part == 1 ? s.NH : s.NH + s.KVH;
        for (int h = 0; h < s.NH; ++h) {
          double* d = dst + (first + (part == 0 ? h : h / G)) * HS;
          for (int i = 0; i < HS; ++i) d[i] += row[part * s.C + h * HS + i];
        }
      }
    }
  }
  return out;
}

float dot_row_host(const float* a, const float* b, int HS) {
  dm::Dot4 acc;
  for (int i = 0; i < HS; i += 4) acc.add(a[i], a[i + 1], a[i + 2], a[i + 3], b[i], b[i + 1], b[i + 2], b[i + 3]);
  return acc.total();
}

// attention_forward_kernel (attention.cu): warp per (b, h, t), online softmax
// over tiles of 32 keys of h's key/value head; lane l scores key s0 + l and
// owns output channels l, l+32, ... (Which shared-memory tile a row comes
// from does not change the arithmetic; where the tiles start does, for dk/dv
// below.)
void attention_forward_host(float* out, float* lse, const float* qkv, const Shape& s, int first_row) {
  const int HS = s.HS(), dims = HS / kWarpSize, R = s.T - first_row, G = s.NH / s.KVH;
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.NH; ++h) {
      for (int r = 0; r < R; ++r) {
        const int t = first_row + r;
        const float* q = qkv_row(qkv, 0, b, t, h, s);
        float m = -INFINITY, l = 0.0f;
        std::vector<float> acc(static_cast<size_t>(HS), 0.0f);  // channel lane + 32 j
        for (int s0 = 0; s0 <= t; s0 += kWarpSize) {
          float score[kWarpSize], p[kWarpSize], lanes[kWarpSize];
          for (int lane = 0; lane < kWarpSize; ++lane) {
            const int key = s0 + lane;
            score[lane] = key <= t ? scale * dot_row_host(q, qkv_row(qkv, 1, b, key, h / G, s), HS) : -INFINITY;
            lanes[lane] = score[lane];
          }
          const float m_new = fmaxf(m, dm::warp_butterfly(lanes, dm::MaxOp{}));
          const float corr = dm::softmax_rescale(m, m_new);
          for (int lane = 0; lane < kWarpSize; ++lane) {
            p[lane] = s0 + lane <= t ? expf(score[lane] - m_new) : 0.0f;
            lanes[lane] = p[lane];
          }
          l = l * corr + dm::warp_butterfly(lanes, dm::SumOp{});
          for (float& a : acc) a *= corr;
          const int count = std::min(kWarpSize, t - s0 + 1);
          for (int k = 0; k < count; ++k) {
            const float* v = qkv_row(qkv, 2, b, s0 + k, h / G, s);
            for (int i = 0; i < dims * kWarpSize; ++i) acc[i] += p[k] * v[i];
          }
          m = m_new;
        }
        float* o = out + (static_cast<int64_t>(b) * R + r) * s.C + h * HS;
        for (int i = 0; i < HS; ++i) o[i] = acc[i] / l;
        if (lse != nullptr) lse[(static_cast<int64_t>(b) * s.NH + h) * R + r] = dm::softmax_lse(m, l);
      }
    }
  }
}

// attention_backward_dq_kernel then attention_backward_dkv_kernel (attention.cu).
void attention_backward_host(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv,
                             const Shape& s) {
  const int HS = s.HS(), T = s.T, C = s.C, G = s.NH / s.KVH;
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  std::vector<float> d_rows(static_cast<size_t>(s.B) * s.NH * T);
  auto dout_row = [&](int b, int t, int h) { return dout + (static_cast<int64_t>(b) * T + t) * C + h * HS; };
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.NH; ++h) {
      const int64_t bh = static_cast<int64_t>(b) * s.NH + h;
      for (int t = 0; t < T; ++t) {  // pass 1: warp per query row
        const float* q = qkv_row(qkv, 0, b, t, h, s);
        const float* dO = dout_row(b, t, h);
        const float* O = out + (static_cast<int64_t>(b) * T + t) * C + h * HS;
        const float D = warp_row_reduce(HS, 0.0f, [&](int i) { return dO[i] * O[i]; }, dm::SumOp{});
        d_rows[bh * T + t] = D;
        std::vector<float> acc(static_cast<size_t>(HS), 0.0f);
        for (int s0 = 0; s0 <= t; s0 += kWarpSize) {
          float ds[kWarpSize];
          for (int lane = 0; lane < kWarpSize; ++lane) {
            const int key = s0 + lane;
            ds[lane] = 0.0f;
            if (key <= t) {
              const float p =
                  expf(scale * dot_row_host(q, qkv_row(qkv, 1, b, key, h / G, s), HS) - lse[bh * T + t]);
              const float dp = dot_row_host(dO, qkv_row(qkv, 2, b, key, h / G, s), HS);
              ds[lane] = dm::attention_dscore(p, dp, D, scale);
            }
          }
          for (int k = 0; k < std::min(kWarpSize, t - s0 + 1); ++k) {
            const float* key = qkv_row(qkv, 1, b, s0 + k, h / G, s);
            for (int i = 0; i < HS; ++i) acc[i] += ds[k] * key[i];
          }
        }
        std::copy(acc.begin(), acc.end(), qkv_row(dqkv, 0, b, t, h, s));
      }
    }
  }
  for (int b = 0; b < s.B; ++b) {
    for (int g = 0; g < s.KVH; ++g) {
      for (int j = 0; j < T; ++j) {  // pass 2: warp per key row of head g
        const float* k_j = qkv_row(qkv, 1, b, j, g, s);
        const float* v_j = qkv_row(qkv, 2, b, j, g, s);
        std::vector<float> acc_k(static_cast<size_t>(HS), 0.0f), acc_v(static_cast<size_t>(HS), 0.0f);
        // Query tiles start at the block's first key row (blocks of kAttnWarps
        // rows); the group's query heads one after the other.
        const int j0 = j / dm::kAttnWarps * dm::kAttnWarps;
        for (int h = g * G; h < (g + 1) * G; ++h) {
          const int64_t bh = static_cast<int64_t>(b) * s.NH + h;
          for (int i0 = j0; i0 < T; i0 += kWarpSize) {
            if (i0 + kWarpSize <= j) continue;
            float p[kWarpSize], ds[kWarpSize];
            for (int lane = 0; lane < kWarpSize; ++lane) {
              const int i = i0 + lane;
              p[lane] = ds[lane] = 0.0f;
              if (i >= j && i < T) {
                p[lane] = expf(scale * dot_row_host(k_j, qkv_row(qkv, 0, b, i, h, s), HS) - lse[bh * T + i]);
                const float dp = dot_row_host(v_j, dout_row(b, i, h), HS);
                ds[lane] = dm::attention_dscore(p[lane], dp, d_rows[bh * T + i], scale);
              }
            }
            for (int k = std::max(0, j - i0); k < std::min(kWarpSize, T - i0); ++k) {
              const float* q = qkv_row(qkv, 0, b, i0 + k, h, s);
              const float* dO = dout_row(b, i0 + k, h);
              for (int i = 0; i < HS; ++i) {
                acc_v[i] += p[k] * dO[i];
                acc_k[i] += ds[k] * q[i];
              }
            }
          }
        }
        std::copy(acc_k.begin(), acc_k.end(), qkv_row(dqkv, 1, b, j, g, s));
        std::copy(acc_v.begin(), acc_v.end(), qkv_row(dqkv, 2, b, j, g, s));
      }
    }
  }
}

// Against the reference's multi-head kernels on the expanded input
// (expand_kv; the identity where KVH = NH).
class AttentionTest : public ::testing::TestWithParam<Shape> {};

// Scores are |q.k| / sqrt(HS) with q, k in [-2, 2]: softmax rows are far
// from uniform. Against the double reference the float path loses a few
// ulp per term of HS-long dots and T-long sums: observed <= 6e-7 on
// outputs of |.| <~ 2 and lse <~ 5; the tolerances leave about 10x.
TEST_P(AttentionTest, ForwardMatchesReference) {
  const Shape s = GetParam();
  auto qkv = random_vec(s.qkv_size(), 40 + s.T, -2.0f, 2.0f);
  std::vector<float> out(static_cast<size_t>(s.B) * s.T * s.C), lse(static_cast<size_t>(s.B) * s.NH * s.T);
  std::vector<double> ref_out(out.size()), ref_lse(lse.size());
  attention_forward_host(out.data(), lse.data(), qkv.data(), s, 0);
  ref::attention_forward(ref_out.data(), ref_lse.data(), expand_kv<double>(qkv, s).data(), s.B, s.T, s.C, s.NH);
  EXPECT_TRUE(all_close("attention out", out, ref_out, 5e-6, 2e-6));
  EXPECT_TRUE(all_close("attention lse", lse, ref_lse, 2e-6, 1e-6));

  // first_row > 0: the last rows only, same values as the full forward's
  // rows (the same per-row arithmetic), lse skipped (nullptr).
  const int first_row = s.T / 2, R = s.T - first_row;
  std::vector<float> part(static_cast<size_t>(s.B) * R * s.C, NAN);
  attention_forward_host(part.data(), nullptr, qkv.data(), s, first_row);
  std::vector<float> expect;
  for (int b = 0; b < s.B; ++b) {
    auto from = out.begin() + (static_cast<int64_t>(b) * s.T + first_row) * s.C;
    expect.insert(expect.end(), from, from + static_cast<int64_t>(R) * s.C);
  }
  EXPECT_TRUE(all_close("attention first_row", part, expect, 0, 0));

  if (s.KVH != s.NH) {
    // The grouped kernel on qkv does bitwise what the multi-head kernel
    // does on the expanded input: sharing a head changes no arithmetic.
    const Shape mha{s.B, s.T, s.C, s.NH, s.NH};
    std::vector<float> out_mha(out.size()), lse_mha(lse.size());
    attention_forward_host(out_mha.data(), lse_mha.data(), expand_kv<float>(qkv, s).data(), mha, 0);
    EXPECT_TRUE(all_close("attention out (expanded)", out, out_mha, 0, 0));
    EXPECT_TRUE(all_close("attention lse (expanded)", lse, lse_mha, 0, 0));
  }
}

// Decode: B = 1, first_row = T - 1, against the reference's attention_decode.
TEST_P(AttentionTest, DecodeMatchesReference) {
  Shape s = GetParam();
  s.B = 1;
  auto qkv = random_vec(s.qkv_size(), 50 + s.T, -2.0f, 2.0f);
  std::vector<float> out(static_cast<size_t>(s.C)), lse(static_cast<size_t>(s.NH));
  std::vector<double> ref_out(out.size());
  attention_forward_host(out.data(), lse.data(), qkv.data(), s, s.T - 1);
  ref::attention_decode(ref_out.data(), expand_kv<double>(qkv, s).data(), s.T, s.C, s.NH);
  EXPECT_TRUE(all_close("attention decode", out, ref_out, 5e-6, 2e-6));
}

// dqkv holds sums over up to T terms of products of O(1) values (float
// against double): observed <= 1.2e-6 on |.| <~ 3; about 10x margin. A
// key/value head of a group of G sums G times as many terms.
TEST_P(AttentionTest, BackwardMatchesReference) {
  const Shape s = GetParam();
  auto qkv = random_vec(s.qkv_size(), 60 + s.T, -2.0f, 2.0f);
  auto dout = random_vec(static_cast<size_t>(s.B) * s.T * s.C, 61 + s.T);
  std::vector<float> out(dout.size()), lse(static_cast<size_t>(s.B) * s.NH * s.T);
  attention_forward_host(out.data(), lse.data(), qkv.data(), s, 0);
  std::vector<float> dqkv(qkv.size(), NAN);  // overwritten, every element
  attention_backward_host(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), s);
  std::vector<double> ref_dexp(static_cast<size_t>(s.B) * s.T * 3 * s.C);
  ref::attention_backward(ref_dexp.data(), to_double(dout).data(), expand_kv<double>(qkv, s).data(), s.B, s.T, s.C,
                          s.NH);
  const double G = static_cast<double>(s.NH / s.KVH);
  EXPECT_TRUE(all_close("attention dqkv", dqkv, reduce_kv(ref_dexp, s), 1e-5 * G, 2e-6 * G));
}

// T crosses the 32-key chunks (1, 2 and 3 chunks, one with a single key);
// HS = 32, 64, 96, 128 cover the four kernel instantiations; the last three
// are grouped (G = 2, 4 and 3; KVH = 1 is multi-query attention).
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(Shape{2, 8, 64, 2, 2}, Shape{2, 33, 64, 1, 1}, Shape{2, 70, 128, 2, 2},
                                           Shape{1, 40, 192, 2, 2}, Shape{2, 65, 256, 2, 2},
                                           Shape{2, 17, 128, 4, 4}, Shape{2, 40, 128, 4, 2},
                                           Shape{1, 70, 256, 4, 1}, Shape{2, 33, 192, 6, 2}));

// ------------------------------------------------------------ elementwise

TEST(DeviceMath, GeluMatchesReference) {
  const int64_t n = 4099;
  auto inp = random_vec(n, 70, -6.0f, 6.0f), dout = random_vec(n, 71);
  std::vector<float> out(n), ref_out(n), ref_dinp(n);
  for (int64_t i = 0; i < n; ++i) out[i] = dm::gelu_forward(inp[i]);
  ref::gelu_forward(ref_out.data(), inp.data(), n);
  // The same formula; sqrt(2/pi) is a literal here and computed there
  // (1 ulp apart), so a few ulp of |out| <~ 6.
  EXPECT_TRUE(all_close("gelu_forward", out, ref_out, 1e-6, 1e-6));
  ref::gelu_backward(ref_dinp.data(), dout.data(), inp.data(), n);
  auto dinp = dout;  // in place: dinp aliases dout, as the kernel allows
  for (int64_t i = 0; i < n; ++i) dinp[i] = dm::gelu_grad(inp[i]) * dinp[i];
  EXPECT_TRUE(all_close("gelu_backward", dinp, ref_dinp, 1e-6, 1e-6));
}

// ReLU exactly; SiLU and its gradient against the formulas in double: a
// few ulp of expf and of the products (|out| <~ 6, |grad| <~ 1.1).
TEST(DeviceMath, ReluAndSiluMatchFormulas) {
  const int64_t n = 4099;
  auto inp = random_vec(n, 74, -6.0f, 6.0f), dout = random_vec(n, 75);
  inp[0] = 0.0f;  // the kink: ReLU's gradient there is 0
  inp[1] = -0.0f;
  inp[2] = -100.0f;  // expf(100) overflows to inf: SiLU -> -0, gradient -> 0
  inp[3] = 100.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i], d = dout[i];
    EXPECT_EQ(dm::relu_forward(x), x > 0.0f ? x : 0.0f) << i;
    EXPECT_EQ(dm::relu_backward(d, x), x > 0.0f ? d : 0.0f) << i;
  }
  std::vector<float> out(n), dinp(n);
  std::vector<double> ref_out(n), ref_dinp(n);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = dm::silu_forward(inp[i]);
    dinp[i] = dm::silu_backward(dout[i], inp[i]);
    const double x = inp[i], sig = 1.0 / (1.0 + std::exp(-x));
    ref_out[i] = x * sig;
    ref_dinp[i] = dout[i] * sig * (1.0 + x * (1.0 - sig));
  }
  EXPECT_TRUE(all_close("silu_forward", out, ref_out, 1e-6, 1e-6));
  EXPECT_TRUE(all_close("silu_backward", dinp, ref_dinp, 1e-6, 1e-6));
}

// swiglu_forward_kernel and swiglu_backward_kernel: element (n, j) of the
// gate half and the up half, against the formulas in double.
TEST(DeviceMath, SwigluMatchesFormulas) {
  const int N = 13, H = 37;
  auto inp = random_vec(static_cast<size_t>(N) * 2 * H, 76, -6.0f, 6.0f);
  auto dout = random_vec(static_cast<size_t>(N) * H, 77);
  std::vector<float> out(dout.size()), dinp(inp.size(), NAN);
  std::vector<double> ref_out(out.size()), ref_dinp(inp.size());
  for (int n = 0; n < N; ++n) {
    for (int j = 0; j < H; ++j) {
      const int64_t at = static_cast<int64_t>(n) * 2 * H + j, o = static_cast<int64_t>(n) * H + j;
      const float g = inp[at], u = inp[at + H], d = dout[o];
      out[o] = dm::swiglu_forward(g, u);
      dinp[at] = dm::swiglu_dgate(d, g, u);
      dinp[at + H] = dm::swiglu_dup(d, g);
      const double sig = 1.0 / (1.0 + std::exp(-static_cast<double>(g))), silu = g * sig;
      ref_out[o] = silu * u;
      ref_dinp[at] = static_cast<double>(d) * u * sig * (1.0 + g * (1.0 - sig));
      ref_dinp[at + H] = d * silu;
    }
  }
  // Products of up to four float roundings on |.| <~ 40.
  EXPECT_TRUE(all_close("swiglu_forward", out, ref_out, 1e-6, 1e-6));
  EXPECT_TRUE(all_close("swiglu_backward", dinp, ref_dinp, 1e-6, 1e-6));
}

// ------------------------------------------------------------ rope

// The (cos, sin) of backend.h, spelled out: pow, multiply, cos and sin in
// double, each rounded to float. rope_cos_sin must give these bits.
dm::CosSin rope_formula(int pos, int i, int HS, float theta) {
  const double angle = static_cast<double>(pos) * std::pow(static_cast<double>(theta), -2.0 * i / HS);
  return {static_cast<float>(std::cos(angle)), static_cast<float>(std::sin(angle))};
}

TEST(DeviceMath, RopeCosSinIsTheDoubleFormulaBitwise) {
  int checked = 0;
  for (float theta : {10000.0f, 500000.0f, 2.5f}) {
    for (int HS : {32, 64, 128, 6}) {
      for (int pos : {0, 1, 2, 17, 1023, 1024, 4095, 131071}) {
        for (int i = 0; i < HS / 2; ++i) {
          const dm::CosSin got = dm::rope_cos_sin(pos, i, HS, theta), want = rope_formula(pos, i, HS, theta);
          ASSERT_EQ(std::bit_cast<uint32_t>(got.c), std::bit_cast<uint32_t>(want.c))
              << "cos pos " << pos << " i " << i << " HS " << HS << " theta " << theta;
          ASSERT_EQ(std::bit_cast<uint32_t>(got.s), std::bit_cast<uint32_t>(want.s))
              << "sin pos " << pos << " i " << i << " HS " << HS << " theta " << theta;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 3 * 8 * (16 + 32 + 64 + 3));
  // Position 0 is the identity; pair 0 turns by exactly pos radians.
  EXPECT_EQ(dm::rope_cos_sin(0, 5, 64, 10000.0f).c, 1.0f);
  EXPECT_EQ(dm::rope_cos_sin(0, 5, 64, 10000.0f).s, 0.0f);
  EXPECT_EQ(dm::rope_cos_sin(3, 0, 64, 10000.0f).c, static_cast<float>(std::cos(3.0)));
}

// rope_kernel: thread (row n, pair i) rotates pair i of the NH + KVH query
// and key heads of row n by the angle of position pos0 + n % T.
void rope_host(float* qkv, int B, int T, int NH, int KVH, int HS, int pos0, float theta, bool inverse) {
  const int W = (NH + 2 * KVH) * HS;
  for (int64_t n = 0; n < static_cast<int64_t>(B) * T; ++n) {
    for (int i = 0; i < HS / 2; ++i) {
      const dm::CosSin cs = dm::rope_cos_sin(pos0 + static_cast<int>(n % T), i, HS, theta);
      for (int h = 0; h < NH + KVH; ++h) {
        float* x = qkv + n * W + h * HS + 2 * i;
        dm::rope_rotate(x[0], x[1], cs, inverse);
      }
    }
  }
}

class RopeTest : public ::testing::TestWithParam<Shape> {};

TEST_P(RopeTest, RotatesQueryAndKeyHeadsAsTheFormula) {
  const Shape s = GetParam();
  const int HS = s.HS(), W = s.W(), pos0 = 5;
  const float theta = 10000.0f;
  const auto qkv = random_vec(s.qkv_size(), 78 + s.T, -2.0f, 2.0f);
  auto rotated = qkv;
  rope_host(rotated.data(), s.B, s.T, s.NH, s.KVH, HS, pos0, theta, false);
  // x'[2i] = x[2i] c - x[2i+1] s, x'[2i+1] = x[2i] s + x[2i+1] c in double,
  // from the float (c, s); the value heads as they were.
  std::vector<double> want(qkv.begin(), qkv.end());
  for (int64_t n = 0; n < static_cast<int64_t>(s.B) * s.T; ++n) {
    for (int h = 0; h < s.NH + s.KVH; ++h) {
      for (int i = 0; i < HS / 2; ++i) {
        const dm::CosSin cs = rope_formula(pos0 + static_cast<int>(n % s.T), i, HS, theta);
        const int64_t at = n * W + h * HS + 2 * i;
        const double x0 = qkv[at], x1 = qkv[at + 1];
        want[at] = x0 * cs.c - x1 * cs.s;
        want[at + 1] = x0 * cs.s + x1 * cs.c;
      }
    }
  }
  // Two products and a sum in float: a few ulp of |.| <~ 3.
  EXPECT_TRUE(all_close("rope_forward", rotated, want, 1e-6, 1e-6));
  for (int64_t n = 0; n < static_cast<int64_t>(s.B) * s.T; ++n) {
    const int64_t v = n * W + (s.NH + s.KVH) * HS;
    EXPECT_TRUE(std::equal(rotated.begin() + v, rotated.begin() + v + s.KVH * HS, qkv.begin() + v)) << n;
  }
  // The backward turns back: forward then backward is the identity to rounding.
  auto back = rotated;
  rope_host(back.data(), s.B, s.T, s.NH, s.KVH, HS, pos0, theta, true);
  EXPECT_TRUE(all_close("rope_backward(rope_forward)", back, qkv, 1e-6, 1e-6));
}

// Multi-head, grouped and multi-query layouts; HS = 6 is not a multiple of 4.
INSTANTIATE_TEST_SUITE_P(Shapes, RopeTest,
                         ::testing::Values(Shape{2, 7, 64, 2, 2}, Shape{1, 9, 256, 4, 1}, Shape{2, 5, 24, 4, 2}));

TEST(DeviceMath, ResidualMatchesReferenceExactly) {
  const int64_t n = 1001;
  auto a = random_vec(n, 72), b = random_vec(n, 73);
  std::vector<float> out(n), ref_out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  ref::residual_forward(ref_out.data(), a.data(), b.data(), n);
  EXPECT_TRUE(all_close("residual", out, ref_out, 0, 0));
}

// ------------------------------------------------------------ crossentropy

class CrossEntropyTest : public ::testing::TestWithParam<int> {};

TEST_P(CrossEntropyTest, ForwardAndBackwardMatchReference) {
  const int N = 19, V = GetParam();
  auto logits = random_vec(static_cast<size_t>(N) * V, 80 + V, -8.0f, 8.0f);
  auto targets = random_tokens(N, V, 81);
  const float dloss = 1.0f / N;
  std::vector<float> losses(N), ref_losses(N), ref_dlogits(logits.size());
  auto dlogits = logits;  // backward in place: dlogits aliases logits
  for (int row = 0; row < N; ++row) {
    float* z = dlogits.data() + static_cast<int64_t>(row) * V;
    const float maxv = warp_row_reduce(V, -INFINITY, [&](int j) { return z[j]; }, dm::MaxOp{});
    const float sumexp = warp_row_reduce(V, 0.0f, [&](int j) { return expf(z[j] - maxv); }, dm::SumOp{});
    losses[row] = dm::crossentropy_loss(z[targets[row]], maxv, sumexp);
    for (int j = 0; j < V; ++j) z[j] = dm::crossentropy_grad(z[j], maxv, sumexp, j == targets[row], dloss);
  }
  ref::crossentropy_forward(ref_losses.data(), logits.data(), targets.data(), N, V);
  ref::crossentropy_backward(ref_dlogits.data(), logits.data(), targets.data(), dloss, N, V);
  // Sum of V exp terms in another order: ~V * 2^-24 relative in sumexp,
  // its log into the loss (|.| <~ 20); the probabilities are <= 1 / N.
  EXPECT_TRUE(all_close("crossentropy losses", losses, ref_losses, 1e-5, 1e-5));
  EXPECT_TRUE(all_close("crossentropy dlogits", dlogits, ref_dlogits, 1e-8, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Vocab, CrossEntropyTest, ::testing::Values(50, 31, 1000));

// The vocabulary-parallel kernels' arithmetic, as crossentropy_shard_stats,
// _combine and _backward run it per row: a shard's warp reductions over its
// real columns, the P shards' log-sum-exps combined in rank order, the
// gradient with padding; against the reference on shards of an 11-column
// vocabulary cut in 3 (the last with a padding column) and in 5 (the last
// all padding).
TEST(DeviceMath, CrossEntropyShardsMatchReference) {
  constexpr int N = 13, V = 11;
  for (const int P : {3, 5}) {
    const int Vr = (V + P - 1) / P;
    auto logits = random_vec(static_cast<size_t>(N) * P * Vr, 90 + P, -8.0f, 8.0f);  // P shards of (N, Vr)
    auto targets = random_tokens(N, V, 91);
    const float dloss = 1.0f / N;
    std::vector<float> parts(static_cast<size_t>(P + 1) * N, 0.0f), ref_parts(parts.size(), 0.0f);
    for (int r = 0; r < P; ++r) {
      const float* shard = logits.data() + static_cast<size_t>(r) * N * Vr;
      const int64_t v0 = int64_t{r} * Vr;
      const int real = dm::shard_real_columns(Vr, v0, V);
      for (int row = 0; row < N; ++row) {
        const float* z = shard + static_cast<int64_t>(row) * Vr;
        const float maxv = warp_row_reduce(real, -INFINITY, [&](int j) { return z[j]; }, dm::MaxOp{});
        const float sumexp = warp_row_reduce(real, 0.0f, [&](int j) { return expf(z[j] - maxv); }, dm::SumOp{});
        parts[static_cast<size_t>(r) * N + row] = dm::shard_lse(real, maxv, sumexp);
        const int64_t t = targets[row] - v0;
        if (t >= 0 && t < real) parts[static_cast<size_t>(P) * N + row] += z[t];
      }
      std::vector<float> lse(N), picked(N);
      ref::crossentropy_shard_stats(lse.data(), picked.data(), shard, targets.data(), N, Vr, v0, int64_t{V});
      for (int row = 0; row < N; ++row) {
        ref_parts[static_cast<size_t>(r) * N + row] = lse[row];
        ref_parts[static_cast<size_t>(P) * N + row] += picked[row];
      }
    }
    // An all-padding shard's -infinity on both sides (all_close compares finite values).
    std::vector<float> got = parts, want = ref_parts;
    int empty = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isinf(want[i]) && got[i] == want[i]) {
        got[i] = want[i] = 0.0f;
        ++empty;
      }
    }
    EXPECT_EQ(empty, P == 5 ? N : 0) << "the rows of the all-padding shard";
    EXPECT_TRUE(all_close("shard statistics", got, want, 1e-5, 1e-5)) << P << " shards";
    std::vector<float> lse(N), losses(N), ref_lse(N), ref_losses(N);
    for (int row = 0; row < N; ++row) {
      lse[row] = dm::combine_lse(parts.data() + row, P, N);
      losses[row] = lse[row] - parts[static_cast<size_t>(P) * N + row];
    }
    ref::crossentropy_shard_combine(ref_losses.data(), ref_lse.data(), ref_parts.data(), P, N);
    EXPECT_TRUE(all_close("combined losses", losses, ref_losses, 1e-5, 1e-5)) << P << " shards";
    for (int r = 0; r < P; ++r) {
      const float* shard = logits.data() + static_cast<size_t>(r) * N * Vr;
      const int64_t v0 = int64_t{r} * Vr;
      const int real = dm::shard_real_columns(Vr, v0, V);
      std::vector<float> dz(static_cast<size_t>(N) * Vr), ref_dz(dz.size());
      for (int row = 0; row < N; ++row) {
        for (int j = 0; j < Vr; ++j) {
          dz[static_cast<size_t>(row) * Vr + j] = dm::crossentropy_shard_grad(
              shard[static_cast<size_t>(row) * Vr + j], lse[row], j < real, v0 + j == targets[row], dloss);
        }
      }
      ref::crossentropy_shard_backward(ref_dz.data(), shard, ref_lse.data(), targets.data(), dloss, N, Vr, v0,
                                       int64_t{V});
      EXPECT_TRUE(all_close("shard dlogits", dz, ref_dz, 1e-8, 1e-5)) << P << " shards, shard " << r;
    }
  }
}

// ------------------------------------------------------------ adam

TEST(DeviceMath, AdamMatchesReferenceWithinRounding) {
  const int64_t n = 777;
  auto param = random_vec(n, 90), m = random_vec(n, 91, -0.01f, 0.01f), v = random_vec(n, 92, 0.0f, 1e-4f);
  auto ref_param = param, ref_m = m, ref_v = v;
  for (int step = 1; step <= 3; ++step) {
    auto grad = random_vec(n, 93 + step);
    AdamCoefficients k;
    k.step_size = 1e-3f * static_cast<float>(step);
    k.v_scale = 1.0f / std::sqrt(1.0f - std::pow(k.beta2, static_cast<float>(step)));
    k.decay_factor = 1.0f - 1e-4f * static_cast<float>(step);
    k.grad_scale = 0.5f + 0.25f * static_cast<float>(step);
    for (int64_t i = 0; i < n; ++i) dm::adam_element(param[i], m[i], v[i], grad[i], k);
    ref::adam_update(ref_param.data(), grad.data(), ref_m.data(), ref_v.data(), n, k.beta1, k.beta2, k.eps,
                     k.step_size, k.v_scale, k.decay_factor, k.grad_scale);
  }
  // Same operations in the same order. The kernel rounds each one; the host
  // compiler may fuse a multiply-add (-march=native on an FMA machine), so
  // allow two units in the last place of the terms (m and the parameter
  // may cancel), far below any real mistake.
  EXPECT_TRUE(all_close("adam param", param, ref_param, 2.4e-7, 2.4e-7));
  EXPECT_TRUE(all_close("adam m", m, ref_m, 5e-8, 2.4e-7));
  EXPECT_TRUE(all_close("adam v", v, ref_v, 1e-30, 2.4e-7));
}

// ------------------------------------------------------------ reduce

// Block sum of kernels.cu: butterfly per warp, then lane w of warp 0 takes
// warp w's sum (0 beyond) and one more butterfly.
double block_reduce_host(const double* thread_values) {
  constexpr int kWarps = dm::kReduceThreads / kWarpSize;
  double warp_sums[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    double lanes[kWarpSize];
    std::copy(thread_values + w * kWarpSize, thread_values + (w + 1) * kWarpSize, lanes);
    warp_sums[w] = dm::warp_butterfly(lanes, dm::SumOp{});
  }
  double lanes[kWarpSize];
  for (int l = 0; l < kWarpSize; ++l) lanes[l] = l < kWarps ? warp_sums[l] : 0.0;
  return dm::warp_butterfly(lanes, dm::SumOp{});
}

double reduce_sum_host(const float* x, int64_t n, bool square) {
  const int64_t threads = static_cast<int64_t>(dm::kReduceBlocks) * dm::kReduceThreads;
  std::vector<double> partials(dm::kReduceBlocks);
  std::vector<double> acc(dm::kReduceThreads);
  for (int block = 0; block < dm::kReduceBlocks; ++block) {
    for (int tid = 0; tid < dm::kReduceThreads; ++tid) {
      acc[tid] = 0.0;
      for (int64_t i = static_cast<int64_t>(block) * dm::kReduceThreads + tid; i < n; i += threads) {
        const double xi = static_cast<double>(x[i]);
        acc[tid] += square ? xi * xi : xi;
      }
    }
    partials[block] = block_reduce_host(acc.data());
  }
  return block_reduce_host(partials.data());
}

class ReduceTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(ReduceTest, SumsMatchReference) {
  const int64_t n = GetParam();
  auto x = random_vec(static_cast<size_t>(n), 100, -3.0f, 3.0f);
  // Double sums in another order: the reference's sequential sum alone may
  // be off by n * 2^-53 of the sum of magnitudes (the bound used here).
  const double rel = static_cast<double>(n) * std::ldexp(1.0, -53);
  const double ref_sq = ref::sum_squares(x.data(), n);
  EXPECT_NEAR(reduce_sum_host(x.data(), n, true), ref_sq, rel * ref_sq);
  double plain = 0.0, sum_abs = 0.0;
  for (float xi : x) {
    plain += xi;
    sum_abs += std::fabs(xi);
  }
  EXPECT_NEAR(reduce_sum_host(x.data(), n, false), plain, rel * sum_abs);
}

// n below one thread per element, a partial last block, and a grid-stride
// loop (more than 65536 = all threads).
INSTANTIATE_TEST_SUITE_P(Sizes, ReduceTest, ::testing::Values(int64_t{1}, int64_t{1000}, int64_t{200003}));

// The arithmetic of the device's bf16 conversion (dm::bf16_bits, which
// to_bf16_kernel runs; train.precision bf16 on the CUDA stages), built for
// the host, is the host's to_bf16 bit for bit: ties to even both ways,
// signed zeros, subnormals, infinities, overflow to infinity, NaN kept
// quiet, and a million drawn floats of every exponent. The kernel itself on
// a GPU: cuda_kernels_test, ToBf16IsTheHostsRounding.
TEST(DeviceMath, Bf16BitsAreTheHostsRounding) {
  const float specials[] = {0.0f,      -0.0f,     1.0f,       -1.0f,       1.00390625f,  1.01171875f, 3.0e-39f,
                            -3.0e-39f, 1e-45f,    3.3895e38f, -3.3895e38f, 3.4028e38f,   INFINITY,    -INFINITY,
                            NAN,       -NAN,      65504.0f,   0.1f,        std::bit_cast<float>(0x7f800001u)};
  for (float f : specials) {
    EXPECT_EQ(dm::bf16_bits(f), to_bf16(f).bits) << f << " bits " << std::bit_cast<uint32_t>(f);
  }
  EXPECT_EQ(dm::bf16_bits(1.00390625f), 0x3f80);  // a tie (1 + 2^-8) goes to the even 1.0
  EXPECT_EQ(dm::bf16_bits(1.01171875f), 0x3f82);  // a tie (1 + 3 * 2^-8) goes to the even 1 + 2^-6
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 1000000; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const float f = std::bit_cast<float>(static_cast<uint32_t>(x));
    ASSERT_EQ(dm::bf16_bits(f), to_bf16(f).bits) << std::bit_cast<uint32_t>(f);
  }
}

}  // namespace
}  // namespace gpt2::cuda
