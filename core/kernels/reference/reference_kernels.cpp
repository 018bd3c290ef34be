#include "kernels/reference/reference_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

namespace gpt2::ref {

template <typename R>
void encoder_forward(R* out, const int32_t* tokens, const R* wte, const R* wpe, int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      R* o = out + (static_cast<int64_t>(b) * T + t) * C;
      const int32_t tok = tokens[b * T + t];
      const R* pe = wpe + static_cast<int64_t>(t) * C;
      if (tok < 0) {  // a token of another vocabulary shard: the position row alone
        for (int c = 0; c < C; ++c) o[c] = pe[c];
        continue;
      }
      const R* te = wte + static_cast<int64_t>(tok) * C;
      for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
    }
  }
}

template <typename R>
void encoder_backward(R* dwte, R* dwpe, const R* dout, const int32_t* tokens, int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const R* d = dout + (static_cast<int64_t>(b) * T + t) * C;
      const int32_t tok = tokens[b * T + t];
      R* dpe = dwpe + static_cast<int64_t>(t) * C;
      for (int c = 0; c < C; ++c) dpe[c] += d[c];
      if (tok < 0) continue;  // a token of another vocabulary shard
      R* dte = dwte + static_cast<int64_t>(tok) * C;
      for (int c = 0; c < C; ++c) dte[c] += d[c];
    }
  }
}

template <typename R>
void layernorm_forward(R* out, R* mean, R* rstd, const R* inp, const R* weight, const R* bias, int N,
                       int C) {
  const R eps = R(1e-5);
  for (int i = 0; i < N; ++i) {
    const R* x = inp + static_cast<int64_t>(i) * C;
    R m = 0;
    for (int c = 0; c < C; ++c) m += x[c];
    m /= C;
    R var = 0;
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= C;  // biased variance, as PyTorch's LayerNorm
    R s = R(1) / std::sqrt(var + eps);
    R* o = out + static_cast<int64_t>(i) * C;
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[i] = m;
    rstd[i] = s;
  }
}

template <typename R>
void layernorm_backward(R* dinp, R* dweight, R* dbias, const R* dout, const R* inp, const R* weight,
                        const R* mean, const R* rstd, int N, int C) {
  // With xhat = (x - mean) * rstd and g = dout * weight:
  //   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
  for (int i = 0; i < N; ++i) {
    const R* x = inp + static_cast<int64_t>(i) * C;
    const R* d = dout + static_cast<int64_t>(i) * C;
    R* dx = dinp + static_cast<int64_t>(i) * C;
    R g_mean = 0, gx_mean = 0;
    for (int c = 0; c < C; ++c) {
      R xhat = (x[c] - mean[i]) * rstd[i];
      R g = d[c] * weight[c];
      g_mean += g;
      gx_mean += g * xhat;
    }
    g_mean /= C;
    gx_mean /= C;
    for (int c = 0; c < C; ++c) {
      R xhat = (x[c] - mean[i]) * rstd[i];
      R g = d[c] * weight[c];
      dbias[c] += d[c];
      dweight[c] += xhat * d[c];
      dx[c] += rstd[i] * (g - g_mean - xhat * gx_mean);
    }
  }
}

template <typename R>
void rmsnorm_forward(R* out, R* rstd, const R* inp, const R* weight, int N, int C) {
  const R eps = R(1e-5);
  for (int i = 0; i < N; ++i) {
    const R* x = inp + static_cast<int64_t>(i) * C;
    R ms = 0;
    for (int c = 0; c < C; ++c) ms += x[c] * x[c];
    ms /= C;
    R s = R(1) / std::sqrt(ms + eps);
    R* o = out + static_cast<int64_t>(i) * C;
    for (int c = 0; c < C; ++c) o[c] = x[c] * s * weight[c];
    rstd[i] = s;
  }
}

template <typename R>
void rmsnorm_backward(R* dinp, R* dweight, const R* dout, const R* inp, const R* weight, const R* rstd, int N,
                      int C) {
  // With xhat = x * rstd and g = dout * weight (no mean, so no mean(g) term):
  //   dx = rstd * (g - xhat * mean(g * xhat))
  for (int i = 0; i < N; ++i) {
    const R* x = inp + static_cast<int64_t>(i) * C;
    const R* d = dout + static_cast<int64_t>(i) * C;
    R* dx = dinp + static_cast<int64_t>(i) * C;
    R gx_mean = 0;
    for (int c = 0; c < C; ++c) {
      R xhat = x[c] * rstd[i];
      R g = d[c] * weight[c];
      gx_mean += g * xhat;
    }
    gx_mean /= C;
    for (int c = 0; c < C; ++c) {
      R xhat = x[c] * rstd[i];
      R g = d[c] * weight[c];
      dweight[c] += xhat * d[c];
      dx[c] += rstd[i] * (g - xhat * gx_mean);
    }
  }
}

template <typename R>
void matmul_forward(R* out, const R* inp, const R* weight, const R* bias, int N, int C, int OC) {
  for (int i = 0; i < N; ++i) {
    for (int o = 0; o < OC; ++o) {
      R acc = bias ? bias[o] : R(0);
      for (int c = 0; c < C; ++c) acc += inp[static_cast<int64_t>(i) * C + c] * weight[static_cast<int64_t>(o) * C + c];
      out[static_cast<int64_t>(i) * OC + o] = acc;
    }
  }
}

template <typename R>
void matmul_backward(R* dinp, R* dweight, R* dbias, const R* dout, const R* inp, const R* weight,
                     int N, int C, int OC) {
  for (int i = 0; dinp != nullptr && i < N; ++i) {
    for (int c = 0; c < C; ++c) {
      R acc = 0;
      for (int o = 0; o < OC; ++o) acc += dout[static_cast<int64_t>(i) * OC + o] * weight[static_cast<int64_t>(o) * C + c];
      dinp[static_cast<int64_t>(i) * C + c] = acc;
    }
  }
  for (int o = 0; dweight != nullptr && o < OC; ++o) {
    for (int c = 0; c < C; ++c) {
      R acc = 0;
      for (int i = 0; i < N; ++i) acc += dout[static_cast<int64_t>(i) * OC + o] * inp[static_cast<int64_t>(i) * C + c];
      dweight[static_cast<int64_t>(o) * C + c] += acc;
    }
    if (dbias) {
      R acc = 0;
      for (int i = 0; i < N; ++i) acc += dout[static_cast<int64_t>(i) * OC + o];
      dbias[o] += acc;
    }
  }
}

// Where the heads of one qkv row lie (backend.h): NH query heads, then KVH
// key heads, then KVH value heads, HS wide each. With KVH = NH this is the
// multi-head (B,T,3C) layout.
namespace {
struct QkvHeads {
  int T, NH, KVH, HS;
  int64_t width() const { return static_cast<int64_t>(NH + 2 * KVH) * HS; }
  // Head h of q (part 0, h < NH), k (1, h < KVH) or v (2, h < KVH) at (b, t).
  template <typename Ptr>
  Ptr head(Ptr qkv, int part, int b, int t, int h) const {
    const int first = part == 0 ? 0 : (part == 1 ? NH : NH + KVH);
    return qkv + (static_cast<int64_t>(b) * T + t) * width() + static_cast<int64_t>(first + h) * HS;
  }
  // The key/value head query head h reads.
  int kv(int h) const { return h / (NH / KVH); }
};
}  // namespace

// Query row t of head h in batch row b: writes the head's HS outputs to o
// and returns the row's log-sum-exp. p is scratch of at least t+1 values.
template <typename R>
static R attention_row(R* o, R* p, const R* qkv, int b, int t, int h, const QkvHeads& L) {
  const int HS = L.HS, kh = L.kv(h);
  const R scale = R(1) / std::sqrt(R(HS));
  const R* q = L.head(qkv, 0, b, t, h);
  R maxv = -INFINITY;
  for (int s = 0; s <= t; ++s) {  // causal: keys at or before t
    const R* k = L.head(qkv, 1, b, s, kh);
    R dot = 0;
    for (int i = 0; i < HS; ++i) dot += q[i] * k[i];
    p[s] = dot * scale;
    if (p[s] > maxv) maxv = p[s];
  }
  R sum = 0;
  for (int s = 0; s <= t; ++s) {
    p[s] = std::exp(p[s] - maxv);  // shifted by the max for stability
    sum += p[s];
  }
  for (int i = 0; i < HS; ++i) o[i] = 0;
  for (int s = 0; s <= t; ++s) {
    const R* v = L.head(qkv, 2, b, s, kh);
    for (int i = 0; i < HS; ++i) o[i] += p[s] / sum * v[i];
  }
  return maxv + std::log(sum);
}

template <typename R>
void attention_forward(R* out, R* lse, const R* qkv, int B, int T, int C, int NH, int KVH) {
  const QkvHeads L{T, NH, KVH, C / NH};
  std::vector<R> p(static_cast<size_t>(T));
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < T; ++t) {
        R* o = out + (static_cast<int64_t>(b) * T + t) * C + h * L.HS;
        lse[(static_cast<int64_t>(b) * NH + h) * T + t] = attention_row(o, p.data(), qkv, b, t, h, L);
      }
    }
  }
}

template <typename R>
void attention_decode(R* out, const R* qkv, int P, int C, int NH, int KVH) {
  const QkvHeads L{P, NH, KVH, C / NH};
  std::vector<R> p(static_cast<size_t>(P));
  for (int h = 0; h < NH; ++h) attention_row(out + h * L.HS, p.data(), qkv, 0, P - 1, h, L);
}

template <typename R>
void attention_backward(R* dqkv, const R* dout, const R* qkv, int B, int T, int C, int NH, int KVH) {
  // Per (b, h): P = softmax(scale * Q K^T) (causal), O = P V. Then
  //   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dP * P)),
  //   dQ = scale * dS K,  dK = scale * dS^T Q.
  // A key/value head shared by a group of query heads sums their dK and dV
  // (query heads in ascending order).
  const QkvHeads L{T, NH, KVH, C / NH};
  const int HS = L.HS;
  const R scale = R(1) / std::sqrt(R(HS));
  std::vector<R> P(static_cast<size_t>(T) * T), dP(static_cast<size_t>(T) * T);
  for (int64_t i = 0; i < static_cast<int64_t>(B) * T * L.width(); ++i) dqkv[i] = 0;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const int kh = L.kv(h);
      for (int t = 0; t < T; ++t) {
        const R* q = L.head(qkv, 0, b, t, h);
        R maxv = -INFINITY;
        for (int s = 0; s <= t; ++s) {
          const R* k = L.head(qkv, 1, b, s, kh);
          R dot = 0;
          for (int i = 0; i < HS; ++i) dot += q[i] * k[i];
          P[t * T + s] = dot * scale;
          if (P[t * T + s] > maxv) maxv = P[t * T + s];
        }
        R sum = 0;
        for (int s = 0; s <= t; ++s) sum += (P[t * T + s] = std::exp(P[t * T + s] - maxv));
        for (int s = 0; s <= t; ++s) P[t * T + s] /= sum;
      }
      for (int t = 0; t < T; ++t) {
        const R* dO = dout + (static_cast<int64_t>(b) * T + t) * C + h * HS;
        R rowsum = 0;
        for (int s = 0; s <= t; ++s) {
          const R* v = L.head(qkv, 2, b, s, kh);
          R dot = 0;
          for (int i = 0; i < HS; ++i) dot += dO[i] * v[i];
          dP[t * T + s] = dot;
          rowsum += dot * P[t * T + s];
          R* dv = L.head(dqkv, 2, b, s, kh);
          for (int i = 0; i < HS; ++i) dv[i] += P[t * T + s] * dO[i];
        }
        R* dq = L.head(dqkv, 0, b, t, h);
        const R* q = L.head(qkv, 0, b, t, h);
        for (int s = 0; s <= t; ++s) {
          R ds = P[t * T + s] * (dP[t * T + s] - rowsum) * scale;
          const R* k = L.head(qkv, 1, b, s, kh);
          R* dk = L.head(dqkv, 1, b, s, kh);
          for (int i = 0; i < HS; ++i) {
            dq[i] += ds * k[i];
            dk[i] += ds * q[i];
          }
        }
      }
    }
  }
}

namespace {
// Where the query heads of qkv and the key/value heads of a packed block sit
// (reference_kernels.h, attention_block_*).
struct BlockHeads {
  int L, NH, KVH, HS;
  int64_t qkv_width() const { return static_cast<int64_t>(NH + 2 * KVH) * HS; }
  int64_t kv_width() const { return static_cast<int64_t>(2 * KVH) * HS; }
  template <typename Ptr>
  Ptr q(Ptr qkv, int n, int t, int h) const { return qkv + (static_cast<int64_t>(n) * L + t) * qkv_width() + h * HS; }
  // part 0: key head g, part 1: value head g.
  template <typename Ptr>
  Ptr kv(Ptr block, int part, int n, int s, int g) const {
    return block + (static_cast<int64_t>(n) * L + s) * kv_width() + static_cast<int64_t>(part * KVH + g) * HS;
  }
  int group_of(int h) const { return h / (NH / KVH); }
  int visible(int t, bool causal) const { return causal ? t + 1 : L; }  // keys 0 .. visible-1
};
}  // namespace

template <typename R>
void attention_block_forward(R* out, R* lse, const R* qkv, const R* kv, int N, int L, int C, int NH, int KVH,
                             bool causal, bool merge) {
  const BlockHeads Y{L, NH, KVH, C / NH};
  const int HS = Y.HS;
  const R scale = R(1) / std::sqrt(R(HS));
  std::vector<R> p(static_cast<size_t>(L)), o(static_cast<size_t>(HS));
  for (int n = 0; n < N; ++n) {
    for (int h = 0; h < NH; ++h) {
      const int g = Y.group_of(h);
      for (int t = 0; t < L; ++t) {
        const R* q = Y.q(qkv, n, t, h);
        const int S = Y.visible(t, causal);
        R maxv = -INFINITY;
        for (int s = 0; s < S; ++s) {
          const R* k = Y.kv(kv, 0, n, s, g);
          R dot = 0;
          for (int i = 0; i < HS; ++i) dot += q[i] * k[i];
          p[s] = dot * scale;
          if (p[s] > maxv) maxv = p[s];
        }
        R sum = 0;
        for (int s = 0; s < S; ++s) sum += (p[s] = std::exp(p[s] - maxv));
        for (int i = 0; i < HS; ++i) o[i] = 0;
        for (int s = 0; s < S; ++s) {
          const R* v = Y.kv(kv, 1, n, s, g);
          for (int i = 0; i < HS; ++i) o[i] += p[s] / sum * v[i];
        }
        const R block_lse = maxv + std::log(sum);
        R* dst = out + (static_cast<int64_t>(n) * L + t) * C + h * HS;
        R& row_lse = lse[(static_cast<int64_t>(n) * NH + h) * L + t];
        if (!merge) {
          for (int i = 0; i < HS; ++i) dst[i] = o[i];
          row_lse = block_lse;
          continue;
        }
        // The two parts weighted by their shares of the merged normaliser.
        const R m = std::max(row_lse, block_lse);
        const R w_old = std::exp(row_lse - m), w_new = std::exp(block_lse - m), total = w_old + w_new;
        for (int i = 0; i < HS; ++i) dst[i] = (dst[i] * w_old + o[i] * w_new) / total;
        row_lse = m + std::log(total);
      }
    }
  }
}

template <typename R>
void attention_block_backward(R* dqkv, R* dkv, const R* dout, const R* out, const R* lse, const R* qkv,
                              const R* kv, int N, int L, int C, int NH, int KVH, bool causal) {
  // With the final lse and out: P_ts = exp(scale q_t.k_s - lse_t) is the
  // block's part of the whole softmax, D_t = dO_t . O_t, and
  //   dS = P (dO.v_s - D) scale,  dq += dS k,  dk += dS q,  dv += P dO.
  const BlockHeads Y{L, NH, KVH, C / NH};
  const int HS = Y.HS;
  const R scale = R(1) / std::sqrt(R(HS));
  for (int n = 0; n < N; ++n) {
    for (int h = 0; h < NH; ++h) {
      const int g = Y.group_of(h);
      for (int t = 0; t < L; ++t) {
        const R* q = Y.q(qkv, n, t, h);
        R* dq = Y.q(dqkv, n, t, h);
        const R* dO = dout + (static_cast<int64_t>(n) * L + t) * C + h * HS;
        const R* O = out + (static_cast<int64_t>(n) * L + t) * C + h * HS;
        const R row_lse = lse[(static_cast<int64_t>(n) * NH + h) * L + t];
        R D = 0;
        for (int i = 0; i < HS; ++i) D += dO[i] * O[i];
        for (int s = 0; s < Y.visible(t, causal); ++s) {
          const R* k = Y.kv(kv, 0, n, s, g);
          const R* v = Y.kv(kv, 1, n, s, g);
          R score = 0, dp = 0;
          for (int i = 0; i < HS; ++i) {
            score += q[i] * k[i];
            dp += dO[i] * v[i];
          }
          const R P = std::exp(score * scale - row_lse);
          const R dS = P * (dp - D) * scale;
          R* dk = Y.kv(dkv, 0, n, s, g);
          R* dv = Y.kv(dkv, 1, n, s, g);
          for (int i = 0; i < HS; ++i) {
            dq[i] += dS * k[i];
            dk[i] += dS * q[i];
            dv[i] += P * dO[i];
          }
        }
      }
    }
  }
}

// RoPE's rotation of pair i at position pos: the angle pos * theta^(-2i/HS)
// in double, its cosine and sine rounded to float (backend.h).
static void rope_angles(float* c, float* s, int pos, int HS, float theta) {
  for (int i = 0; i < HS / 2; ++i) {
    const double a = static_cast<double>(pos) * std::pow(static_cast<double>(theta), -2.0 * i / HS);
    c[i] = static_cast<float>(std::cos(a));
    s[i] = static_cast<float>(std::sin(a));
  }
}

// Turns every pair of the query and key heads (the row's first NH + KVH
// heads) by +angle (sign 1, forward) or -angle (sign -1, backward).
template <typename R>
static void rope_rotate(R* qkv, int B, int T, int NH, int KVH, int HS, int pos0, float theta, int sign) {
  const QkvHeads L{T, NH, KVH, HS};
  std::vector<float> c(static_cast<size_t>(HS / 2)), sn(static_cast<size_t>(HS / 2));
  for (int t = 0; t < T; ++t) {
    rope_angles(c.data(), sn.data(), pos0 + t, HS, theta);
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH + KVH; ++h) {
        R* x = L.head(qkv, 0, b, t, h);  // query heads, then the key heads right after them
        for (int i = 0; i < HS / 2; ++i) {
          const R co = R(c[i]), si = R(sign) * R(sn[i]);
          const R x0 = x[2 * i], x1 = x[2 * i + 1];
          x[2 * i] = x0 * co - x1 * si;
          x[2 * i + 1] = x0 * si + x1 * co;
        }
      }
    }
  }
}

template <typename R>
void rope_forward(R* qkv, int B, int T, int NH, int KVH, int HS, int pos0, float theta) {
  rope_rotate(qkv, B, T, NH, KVH, HS, pos0, theta, 1);
}

template <typename R>
void rope_backward(R* dqkv, int B, int T, int NH, int KVH, int HS, int pos0, float theta) {
  rope_rotate(dqkv, B, T, NH, KVH, HS, pos0, theta, -1);
}

template <typename R>
static R gelu_inner(R x) {
  const R k = std::sqrt(R(2) / std::numbers::pi_v<R>);
  return k * (x + R(0.044715) * x * x * x);
}

template <typename R>
void gelu_forward(R* out, const R* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = R(0.5) * inp[i] * (R(1) + std::tanh(gelu_inner(inp[i])));
}

template <typename R>
void gelu_backward(R* dinp, const R* dout, const R* inp, int64_t n) {
  const R k = std::sqrt(R(2) / std::numbers::pi_v<R>);
  for (int64_t i = 0; i < n; ++i) {
    R x = inp[i];
    R th = std::tanh(gelu_inner(x));
    R sech2 = R(1) - th * th;
    R grad = R(0.5) * (R(1) + th) + R(0.5) * x * sech2 * k * (R(1) + R(3) * R(0.044715) * x * x);
    dinp[i] = grad * dout[i];
  }
}

template <typename R>
void relu_forward(R* out, const R* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] > R(0) ? inp[i] : R(0);
}

template <typename R>
void relu_backward(R* dinp, const R* dout, const R* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dinp[i] = inp[i] > R(0) ? dout[i] : R(0);
}

template <typename R>
static R sigmoid(R x) {
  return R(1) / (R(1) + std::exp(-x));
}

template <typename R>
void silu_forward(R* out, const R* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] * sigmoid(inp[i]);
}

template <typename R>
void silu_backward(R* dinp, const R* dout, const R* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    R x = inp[i], s = sigmoid(x);
    dinp[i] = dout[i] * s * (R(1) + x * (R(1) - s));
  }
}

template <typename R>
void swiglu_forward(R* out, const R* inp, int N, int H) {
  for (int r = 0; r < N; ++r) {
    const R* g = inp + static_cast<int64_t>(r) * 2 * H;
    const R* u = g + H;
    R* o = out + static_cast<int64_t>(r) * H;
    for (int j = 0; j < H; ++j) o[j] = g[j] * sigmoid(g[j]) * u[j];
  }
}

template <typename R>
void swiglu_backward(R* dinp, const R* dout, const R* inp, int N, int H) {
  for (int r = 0; r < N; ++r) {
    const R* g = inp + static_cast<int64_t>(r) * 2 * H;
    const R* u = g + H;
    const R* d = dout + static_cast<int64_t>(r) * H;
    R* dg = dinp + static_cast<int64_t>(r) * 2 * H;
    R* du = dg + H;
    for (int j = 0; j < H; ++j) {
      R x = g[j], s = sigmoid(x);
      dg[j] = d[j] * u[j] * s * (R(1) + x * (R(1) - s));
      du[j] = d[j] * x * s;
    }
  }
}

template <typename R>
void residual_forward(R* out, const R* a, const R* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename R>
void crossentropy_forward(R* losses, const R* logits, const int32_t* targets, int N, int V) {
  for (int i = 0; i < N; ++i) {
    const R* z = logits + static_cast<int64_t>(i) * V;
    R maxv = z[0];
    for (int j = 1; j < V; ++j) maxv = std::max(maxv, z[j]);
    R sum = 0;
    for (int j = 0; j < V; ++j) sum += std::exp(z[j] - maxv);
    losses[i] = maxv + std::log(sum) - z[targets[i]];
  }
}

template <typename R>
void crossentropy_shard_stats(R* lse, R* target_logit, const R* logits, const int32_t* targets, int N, int W,
                              int64_t v0, int64_t vocab) {
  const int real = static_cast<int>(std::clamp<int64_t>(vocab - v0, 0, W));  // columns before the padding
  for (int i = 0; i < N; ++i) {
    const R* z = logits + static_cast<int64_t>(i) * W;
    const int64_t t = targets[i] - v0;
    target_logit[i] = t >= 0 && t < real ? z[t] : R(0);
    if (real == 0) {
      lse[i] = -std::numeric_limits<R>::infinity();
      continue;
    }
    R maxv = z[0];
    for (int j = 1; j < real; ++j) maxv = std::max(maxv, z[j]);
    R sum = 0;
    for (int j = 0; j < real; ++j) sum += std::exp(z[j] - maxv);
    lse[i] = maxv + std::log(sum);
  }
}

template <typename R>
void crossentropy_shard_combine(R* losses, R* lse, const R* parts, int P, int N) {
  for (int i = 0; i < N; ++i) {
    R maxv = parts[i];
    for (int r = 1; r < P; ++r) maxv = std::max(maxv, parts[static_cast<int64_t>(r) * N + i]);
    R sum = 0;
    for (int r = 0; r < P; ++r) sum += std::exp(parts[static_cast<int64_t>(r) * N + i] - maxv);
    lse[i] = maxv + std::log(sum);
    losses[i] = lse[i] - parts[static_cast<int64_t>(P) * N + i];
  }
}

template <typename R>
void crossentropy_shard_backward(R* dlogits, const R* logits, const R* lse, const int32_t* targets, R dloss, int N,
                                 int W, int64_t v0, int64_t vocab) {
  const int real = static_cast<int>(std::clamp<int64_t>(vocab - v0, 0, W));
  for (int i = 0; i < N; ++i) {
    const R* z = logits + static_cast<int64_t>(i) * W;
    R* dz = dlogits + static_cast<int64_t>(i) * W;
    const int64_t t = targets[i] - v0;
    for (int j = 0; j < W; ++j) {
      dz[j] = j < real ? dloss * (std::exp(z[j] - lse[i]) - (j == t ? R(1) : R(0))) : R(0);
    }
  }
}

template <typename R>
void crossentropy_backward(R* dlogits, const R* logits, const int32_t* targets, R dloss, int N, int V) {
  for (int i = 0; i < N; ++i) {
    const R* z = logits + static_cast<int64_t>(i) * V;
    R* dz = dlogits + static_cast<int64_t>(i) * V;
    R maxv = z[0];
    for (int j = 1; j < V; ++j) maxv = std::max(maxv, z[j]);
    R sum = 0;
    for (int j = 0; j < V; ++j) sum += std::exp(z[j] - maxv);
    const int target = targets[i];
    for (int j = 0; j < V; ++j) {
      R p = std::exp(z[j] - maxv) / sum;
      dz[j] = dloss * (p - (j == target ? R(1) : R(0)));
    }
  }
}

template <typename R>
void adam_update(R* param, const R* grad, R* m, R* v, int64_t n, R beta1, R beta2, R eps, R step_size,
                 R v_scale, R decay_factor, R grad_scale) {
  for (int64_t i = 0; i < n; ++i) {
    R g = grad[i] * grad_scale;
    m[i] = beta1 * m[i] + (R(1) - beta1) * g;
    v[i] = beta2 * v[i] + (R(1) - beta2) * g * g;
    param[i] = param[i] * decay_factor - step_size * m[i] / (std::sqrt(v[i]) * v_scale + eps);
  }
}

template <typename R>
double sum_squares(const R* x, int64_t n) {
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return acc;
}

#define GPT2_REF_INSTANTIATE(R)                                                                      \
  template void encoder_forward<R>(R*, const int32_t*, const R*, const R*, int, int, int);          \
  template void encoder_backward<R>(R*, R*, const R*, const int32_t*, int, int, int);               \
  template void layernorm_forward<R>(R*, R*, R*, const R*, const R*, const R*, int, int);           \
  template void layernorm_backward<R>(R*, R*, R*, const R*, const R*, const R*, const R*, const R*, \
                                      int, int);                                                     \
  template void rmsnorm_forward<R>(R*, R*, const R*, const R*, int, int);                           \
  template void rmsnorm_backward<R>(R*, R*, const R*, const R*, const R*, const R*, int, int);      \
  template void matmul_forward<R>(R*, const R*, const R*, const R*, int, int, int);                 \
  template void matmul_backward<R>(R*, R*, R*, const R*, const R*, const R*, int, int, int);        \
  template void attention_forward<R>(R*, R*, const R*, int, int, int, int, int);                    \
  template void attention_backward<R>(R*, const R*, const R*, int, int, int, int, int);             \
  template void attention_decode<R>(R*, const R*, int, int, int, int);                              \
  template void attention_block_forward<R>(R*, R*, const R*, const R*, int, int, int, int, int, bool, bool); \
  template void attention_block_backward<R>(R*, R*, const R*, const R*, const R*, const R*, const R*, int, int, \
                                            int, int, int, bool);                                   \
  template void rope_forward<R>(R*, int, int, int, int, int, int, float);                           \
  template void rope_backward<R>(R*, int, int, int, int, int, int, float);                          \
  template void gelu_forward<R>(R*, const R*, int64_t);                                              \
  template void gelu_backward<R>(R*, const R*, const R*, int64_t);                                   \
  template void relu_forward<R>(R*, const R*, int64_t);                                              \
  template void relu_backward<R>(R*, const R*, const R*, int64_t);                                   \
  template void silu_forward<R>(R*, const R*, int64_t);                                              \
  template void silu_backward<R>(R*, const R*, const R*, int64_t);                                   \
  template void swiglu_forward<R>(R*, const R*, int, int);                                           \
  template void swiglu_backward<R>(R*, const R*, const R*, int, int);                                \
  template void residual_forward<R>(R*, const R*, const R*, int64_t);                                \
  template void crossentropy_forward<R>(R*, const R*, const int32_t*, int, int);                     \
  template void crossentropy_backward<R>(R*, const R*, const int32_t*, R, int, int);                 \
  template void crossentropy_shard_stats<R>(R*, R*, const R*, const int32_t*, int, int, int64_t, int64_t); \
  template void crossentropy_shard_combine<R>(R*, R*, const R*, int, int);                           \
  template void crossentropy_shard_backward<R>(R*, const R*, const R*, const int32_t*, R, int, int, int64_t, \
                                               int64_t);                                             \
  template void adam_update<R>(R*, const R*, R*, R*, int64_t, R, R, R, R, R, R, R);                 \
  template double sum_squares<R>(const R*, int64_t);

GPT2_REF_INSTANTIATE(float)
GPT2_REF_INSTANTIATE(double)

}  // namespace gpt2::ref
