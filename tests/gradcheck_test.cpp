// Every backward pass against central finite differences, in double, on the
// reference kernels (attention and RoPE multi-head and grouped-query): the
// scalar loss is L = sum(r * out) for a fixed random r (so dout = r), or
// dloss * sum(losses) for the cross-entropy.
// Tolerance: with h = 1e-5, the central difference has truncation error
// ~h^2 |f'''| ~ 1e-10 and rounding error ~1e-16 |L| / h ~ 1e-10 here; a real
// mistake in a gradient formula is O(1). atol 1e-7, rtol 1e-6 separates them.
// The optimised backends are held to the reference by the backend-ops tests
// (backend_ops_test.cpp, cuda_backend_ops_test.cpp).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kernels/reference/reference_kernels.h"
#include "test_util.h"

namespace gpt2 {
namespace {

using Vec = std::vector<double>;

Vec random_dvec(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  auto f = testing::random_vec(n, seed, static_cast<float>(lo), static_cast<float>(hi));
  return Vec(f.begin(), f.end());
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks analytic gradient `grad` of `loss` with respect to `x` (perturbed in place).
void check_gradient(const char* what, Vec& x, const Vec& grad, const std::function<double()>& loss) {
  constexpr double h = 1e-5;
  Vec numeric(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    numeric[i] = (up - down) / (2 * h);
  }
  EXPECT_TRUE(testing::all_close(what, grad, numeric, 1e-7, 1e-6));
}

constexpr int B = 2, T = 5, C = 12, NH = 3, V = 11, N = B * T;

TEST(GradCheck, Encoder) {
  auto tok = testing::random_tokens(N, V, 1);
  tok[3] = tok[1];  // a repeated token: its rows must accumulate
  Vec wte = random_dvec(V * C, 2), wpe = random_dvec(T * C, 3), r = random_dvec(N * C, 4);
  Vec out(N * C);
  auto loss = [&] {
    ref::encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, r);
  };
  Vec dwte(wte.size()), dwpe(wpe.size());
  ref::encoder_backward(dwte.data(), dwpe.data(), r.data(), tok.data(), B, T, C);
  check_gradient("encoder dwte", wte, dwte, loss);
  check_gradient("encoder dwpe", wpe, dwpe, loss);
}

TEST(GradCheck, LayerNorm) {
  Vec x = random_dvec(N * C, 11, -2, 3), w = random_dvec(C, 12), b = random_dvec(C, 13);
  Vec r = random_dvec(N * C, 14);
  Vec out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    ref::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return dot(out, r);
  };
  loss();
  Vec dx(x.size()), dw(C), db(C);
  ref::layernorm_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), mean.data(),
                          rstd.data(), N, C);
  check_gradient("layernorm dinp", x, dx, loss);
  check_gradient("layernorm dweight", w, dw, loss);
  check_gradient("layernorm dbias", b, db, loss);
}

TEST(GradCheck, Matmul) {
  const int OC = 7;
  Vec x = random_dvec(N * C, 21), w = random_dvec(OC * C, 22), bias = random_dvec(OC, 23);
  Vec r = random_dvec(N * OC, 24), out(N * OC);
  auto loss = [&] {
    ref::matmul_forward(out.data(), x.data(), w.data(), bias.data(), N, C, OC);
    return dot(out, r);
  };
  Vec dx(x.size()), dw(w.size()), db(OC);
  ref::matmul_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), N, C, OC);
  check_gradient("matmul dinp", x, dx, loss);
  check_gradient("matmul dweight", w, dw, loss);
  check_gradient("matmul dbias", bias, db, loss);
}

TEST(GradCheck, RmsNorm) {
  Vec x = random_dvec(N * C, 15, -2, 3), w = random_dvec(C, 16), r = random_dvec(N * C, 17);
  Vec out(N * C), rstd(N);
  auto loss = [&] {
    ref::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C);
    return dot(out, r);
  };
  loss();
  // Accumulated: start from nonzero values and check the increment.
  Vec dx0 = random_dvec(N * C, 18), dw0 = random_dvec(C, 19), dx = dx0, dw = dw0;
  ref::rmsnorm_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), N, C);
  for (size_t i = 0; i < dx.size(); ++i) dx[i] -= dx0[i];
  for (size_t i = 0; i < dw.size(); ++i) dw[i] -= dw0[i];
  check_gradient("rmsnorm dinp", x, dx, loss);
  check_gradient("rmsnorm dweight", w, dw, loss);
}

// Multi-head (KVH = NH) and grouped-query: NH 6 query heads over 3, 2 and 1
// key/value heads (groups of 2, 3 and 6), HS 2.
TEST(GradCheck, Attention) {
  for (const int kvh : {NH, 1}) {
    Vec qkv = random_dvec(N * (NH + 2 * kvh) * (C / NH), 31, -2, 2), r = random_dvec(N * C, 32);
    Vec out(N * C), lse(B * NH * T);
    auto loss = [&] {
      ref::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, kvh);
      return dot(out, r);
    };
    Vec dqkv(qkv.size());
    ref::attention_backward(dqkv.data(), r.data(), qkv.data(), B, T, C, NH, kvh);
    check_gradient(kvh == NH ? "attention dqkv" : "attention dqkv, one kv head", qkv, dqkv, loss);
  }
  const int NH6 = 6;
  for (const int kvh : {3, 2, 1}) {
    Vec qkv = random_dvec(N * (NH6 + 2 * kvh) * (C / NH6), 33, -2, 2), r = random_dvec(N * C, 34);
    Vec out(N * C), lse(B * NH6 * T);
    auto loss = [&] {
      ref::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH6, kvh);
      return dot(out, r);
    };
    Vec dqkv(qkv.size());
    ref::attention_backward(dqkv.data(), r.data(), qkv.data(), B, T, C, NH6, kvh);
    check_gradient(("attention dqkv, NH 6 KVH " + std::to_string(kvh)).c_str(), qkv, dqkv, loss);
  }
}

// Context parallelism's ring attention (reference_kernels.h,
// attention_block_*): a chunk of L query rows against its own block (causal)
// and two earlier blocks (every key visible), merged in the order a ring
// brings them. The merged output and log-sum-exp are the whole causal
// attention's rows over the three chunks laid end to end (earlier ones
// first); each block's backward, given the final out and lse, is its share
// of the gradient: q's sums over the blocks, each block's keys and values
// its own; checked against finite differences. Multi-head and grouped-query.
TEST(GradCheck, RingAttention) {
  const int L = T, NHr = 6, HS = C / NHr;
  for (const int kvh : {NHr, 2}) {
    const int W = (NHr + 2 * kvh) * HS, KV = 2 * kvh * HS;
    Vec qkv = random_dvec(B * L * W, 41, -2, 2), r = random_dvec(B * L * C, 42);
    std::vector<Vec> kv = {Vec(B * L * KV), random_dvec(B * L * KV, 43, -2, 2), random_dvec(B * L * KV, 44, -2, 2)};
    Vec out(B * L * C), lse(B * NHr * L);
    auto forward = [&] {
      for (int n = 0; n < B * L; ++n) {  // the own block: qkv's key and value columns
        for (int i = 0; i < KV; ++i) kv[0][n * KV + i] = qkv[n * W + NHr * HS + i];
      }
      ref::attention_block_forward(out.data(), lse.data(), qkv.data(), kv[0].data(), B, L, C, NHr, kvh, true, false);
      for (const int j : {2, 1}) {  // the ring's order: the nearer earlier chunk, then the first
        ref::attention_block_forward(out.data(), lse.data(), qkv.data(), kv[j].data(), B, L, C, NHr, kvh, false, true);
      }
    };
    forward();
    // The whole attention over 3L rows: chunk 1's keys and values, chunk 2's, then the queries' own.
    Vec whole(B * 3 * L * W, 0.0), whole_out(B * 3 * L * C), whole_lse(B * NHr * 3 * L);
    for (int b = 0; b < B; ++b) {
      for (int c = 0; c < 3; ++c) {
        for (int t = 0; t < L; ++t) {
          double* row = &whole[((b * 3 + c) * L + t) * W];
          if (c == 2) {
            for (int i = 0; i < W; ++i) row[i] = qkv[(b * L + t) * W + i];
          } else {
            for (int i = 0; i < KV; ++i) row[NHr * HS + i] = kv[c + 1][(b * L + t) * KV + i];
          }
        }
      }
    }
    ref::attention_forward(whole_out.data(), whole_lse.data(), whole.data(), B, 3 * L, C, NHr, kvh);
    Vec last_out, last_lse;
    for (int b = 0; b < B; ++b) {
      last_out.insert(last_out.end(), whole_out.begin() + (b * 3 + 2) * L * C, whole_out.begin() + (b * 3 + 3) * L * C);
      for (int h = 0; h < NHr; ++h) {
        const auto row = whole_lse.begin() + (b * NHr + h) * 3 * L + 2 * L;
        last_lse.insert(last_lse.end(), row, row + L);
      }
    }
    EXPECT_TRUE(testing::all_close("ring attention out against the whole attention's rows", out, last_out, 1e-12, 1e-12));
    EXPECT_TRUE(testing::all_close("ring attention lse against the whole attention's rows", lse, last_lse, 1e-12, 1e-12));

    auto loss = [&] {
      forward();
      return dot(out, r);
    };
    Vec dqkv(qkv.size(), 0.0);
    std::vector<Vec> dkv(3, Vec(B * L * KV, 0.0));
    for (int j = 0; j < 3; ++j) {
      ref::attention_block_backward(dqkv.data(), dkv[j].data(), r.data(), out.data(), lse.data(), qkv.data(),
                                    kv[j].data(), B, L, C, NHr, kvh, j == 0);
    }
    // The own block's keys and values are qkv's: their gradient lands there.
    for (int n = 0; n < B * L; ++n) {
      for (int i = 0; i < KV; ++i) dqkv[n * W + NHr * HS + i] = dkv[0][n * KV + i];
    }
    const std::string tag = " (KVH " + std::to_string(kvh) + ")";
    check_gradient(("ring attention dqkv" + tag).c_str(), qkv, dqkv, loss);
    check_gradient(("ring attention dkv of the first chunk" + tag).c_str(), kv[1], dkv[1], loss);
    check_gradient(("ring attention dkv of the second chunk" + tag).c_str(), kv[2], dkv[2], loss);
  }
}

// RoPE is linear, so its backward is exact: checked against finite
// differences all the same, with value heads passed through untouched by
// both. NH 3 over KVH 3 and 1, rows at positions 7.., HS 4.
TEST(GradCheck, Rope) {
  for (const int kvh : {NH, 1}) {
    const int HS = C / NH, W = (NH + 2 * kvh) * HS, pos0 = 7;
    const float theta = 10000.0f;
    Vec x = random_dvec(N * W, 35), r = random_dvec(N * W, 36), out(N * W);
    auto loss = [&] {
      out = x;
      ref::rope_forward(out.data(), B, T, NH, kvh, HS, pos0, theta);
      return dot(out, r);
    };
    Vec dx = r;
    ref::rope_backward(dx.data(), B, T, NH, kvh, HS, pos0, theta);
    check_gradient(kvh == NH ? "rope dqkv" : "rope dqkv, one kv head", x, dx, loss);
    // The backward undoes the forward (a rotation's transpose is its
    // inverse), up to c^2 + s^2 = 1 within a few float ulps: cos and sin are
    // rounded to float by the contract.
    Vec y = x;
    ref::rope_forward(y.data(), B, T, NH, kvh, HS, pos0, theta);
    ref::rope_backward(y.data(), B, T, NH, kvh, HS, pos0, theta);
    EXPECT_TRUE(testing::all_close("rope backward after forward", y, x, 0, 4 * 0x1.0p-24));
  }
}

// ReLU away from its kink (|x| >= 0.1, so x +- h keeps its sign), and at
// exactly 0, where the contract fixes the derivative at 0 (the difference
// there would be 1/2).
TEST(GradCheck, Relu) {
  const int n = 200;
  Vec x = random_dvec(n, 43), r = random_dvec(n, 44), out(n);
  for (double& v : x) v = v < 0 ? v - 0.1 : v + 0.1;
  auto loss = [&] {
    ref::relu_forward(out.data(), x.data(), n);
    return dot(out, r);
  };
  Vec dx(n);
  ref::relu_backward(dx.data(), r.data(), x.data(), n);
  check_gradient("relu dinp", x, dx, loss);
  const double zero = 0, d = 1;
  double dz = 7;
  ref::relu_backward(&dz, &d, &zero, 1);
  EXPECT_EQ(dz, 0.0);
}

TEST(GradCheck, Silu) {
  const int n = 200;
  Vec x = random_dvec(n, 45, -6, 6), r = random_dvec(n, 46), out(n);
  auto loss = [&] {
    ref::silu_forward(out.data(), x.data(), n);
    return dot(out, r);
  };
  Vec dx(n);
  ref::silu_backward(dx.data(), r.data(), x.data(), n);
  check_gradient("silu dinp", x, dx, loss);
}

TEST(GradCheck, Swiglu) {
  const int H = 7;
  Vec x = random_dvec(N * 2 * H, 47, -6, 6), r = random_dvec(N * H, 48), out(N * H);
  auto loss = [&] {
    ref::swiglu_forward(out.data(), x.data(), N, H);
    return dot(out, r);
  };
  Vec dx(x.size());
  ref::swiglu_backward(dx.data(), r.data(), x.data(), N, H);
  check_gradient("swiglu dinp", x, dx, loss);
}

TEST(GradCheck, CrossEntropy) {
  Vec z = random_dvec(N * V, 51, -4, 4), losses(N);
  auto tgt = testing::random_tokens(N, V, 52);
  const double dloss = 1.0 / N;
  auto loss = [&] {
    ref::crossentropy_forward(losses.data(), z.data(), tgt.data(), N, V);
    double s = 0;
    for (double l : losses) s += l;
    return dloss * s;
  };
  Vec dz(z.size());
  ref::crossentropy_backward(dz.data(), z.data(), tgt.data(), dloss, N, V);
  check_gradient("crossentropy dlogits", z, dz, loss);
}

// The vocabulary-parallel cross-entropy: the (N, V) logits cut into P
// shards of Vr = ceil(V / P) columns: P = 3 gives 3 shards of 4 (the last
// shard's last column padding), P = 5 gives 5 of 3 (the fourth shard's last
// column padding, the fifth all padding: its log-sum-exp is -infinity). Each
// shard's statistics, the group's sum and the combination give the loss,
// and each shard's backward its part of dlogits. Both are checked against
// the whole-row cross-entropy too (same loss, same gradient).
void check_vocab_shards(const int P) {
  const int Vr = (V + P - 1) / P;
  SCOPED_TRACE(::testing::Message() << P << " shards");
  Vec z = random_dvec(N * V, 53, -4, 4), losses(N), lse(N);
  auto tgt = testing::random_tokens(N, V, 54);
  const double dloss = 1.0 / N;
  auto shard = [&](int r) {  // shard r's columns (N, Vr), zeros past V
    Vec s(static_cast<size_t>(N * Vr), 0.0);
    for (int i = 0; i < N; ++i) {
      for (int j = 0; j < Vr && r * Vr + j < V; ++j) s[i * Vr + j] = z[i * V + r * Vr + j];
    }
    return s;
  };
  auto loss = [&] {
    Vec parts(static_cast<size_t>((P + 1) * N), 0.0);  // the group's sum of every rank's rows
    for (int r = 0; r < P; ++r) {
      Vec mine(N), picked(N);
      const Vec s = shard(r);
      ref::crossentropy_shard_stats(mine.data(), picked.data(), s.data(), tgt.data(), N, Vr, int64_t{r} * Vr,
                                    int64_t{V});
      for (int i = 0; i < N; ++i) {
        parts[r * N + i] += mine[i];
        parts[P * N + i] += picked[i];
      }
    }
    ref::crossentropy_shard_combine(losses.data(), lse.data(), parts.data(), P, N);
    double sum = 0;
    for (double l : losses) sum += l;
    return dloss * sum;
  };
  const double sharded = loss();
  Vec whole(N);
  ref::crossentropy_forward(whole.data(), z.data(), tgt.data(), N, V);
  EXPECT_TRUE(testing::all_close("sharded losses against the whole row's", losses, whole, 1e-12, 1e-12));
  Vec dz(z.size()), dz_whole(z.size());
  for (int r = 0; r < P; ++r) {
    const Vec s = shard(r);
    Vec ds(s.size(), 7.0);
    ref::crossentropy_shard_backward(ds.data(), s.data(), lse.data(), tgt.data(), dloss, N, Vr, int64_t{r} * Vr,
                                     int64_t{V});
    for (int i = 0; i < N; ++i) {
      for (int j = 0; j < Vr; ++j) {
        if (r * Vr + j < V) dz[i * V + r * Vr + j] = ds[i * Vr + j];
        else EXPECT_EQ(ds[i * Vr + j], 0.0) << "padding column " << j << " of shard " << r;
      }
    }
  }
  ref::crossentropy_backward(dz_whole.data(), z.data(), tgt.data(), dloss, N, V);
  EXPECT_TRUE(testing::all_close("sharded dlogits against the whole row's", dz, dz_whole, 1e-15, 1e-12));
  EXPECT_GT(sharded, 0.0);
  check_gradient("sharded crossentropy dlogits", z, dz, loss);
}

TEST(GradCheck, CrossEntropyVocabShards) {
  check_vocab_shards(3);
  check_vocab_shards(5);
}

// A negative token id (another vocabulary shard's token) adds the position
// row alone and takes no embedding gradient.
TEST(GradCheck, EncoderMaskedTokens) {
  auto tok = testing::random_tokens(N, V, 5);
  tok[0] = tok[4] = -1;
  Vec wte = random_dvec(V * C, 6), wpe = random_dvec(T * C, 7), r = random_dvec(N * C, 8);
  Vec out(N * C);
  auto loss = [&] {
    ref::encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, r);
  };
  loss();
  for (int c = 0; c < C; ++c) EXPECT_EQ(out[c], wpe[c]);  // position 0's row alone
  Vec dwte(wte.size()), dwpe(wpe.size());
  ref::encoder_backward(dwte.data(), dwpe.data(), r.data(), tok.data(), B, T, C);
  check_gradient("masked encoder dwte", wte, dwte, loss);
  check_gradient("masked encoder dwpe", wpe, dwpe, loss);
}

}  // namespace
}  // namespace gpt2
