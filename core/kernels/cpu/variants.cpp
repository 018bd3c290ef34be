// The architecture variants' kernels on the CPU (model.norm rmsnorm,
// model.position rope, model.activation relu/silu, model.mlp swiglu):
// row-wise or element-wise loops, vectorisable, over OpenMP threads. The
// RMSNorm weight gradient sums over rows through per-thread partials added
// in thread order, as LayerNorm's does, so results repeat bit for bit.
#include <omp.h>

#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/fast_math.h"

namespace gpt2::cpu {

namespace {
inline float sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }
}  // namespace

void CpuBackend::rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight) {
  dispatch_dtype(out.dtype, [&](auto tag) { rmsnorm_rows(out.as<decltype(tag)>(), rstd, inp, weight); });
}

template <typename T>
void CpuBackend::rmsnorm_rows(T* out, Tensor rstd, Tensor inp, Tensor weight) {
  const int64_t N = inp.rows(), C = inp.cols();
  const float* w = weight.data;
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp.data + i * C;
    T* o = out + i * C;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < C; ++c) sq += x[c] * x[c];
    const float s = 1.0f / std::sqrt(sq / static_cast<float>(C) + 1e-5f);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) store(o, c, x[c] * s * w[c]);
    rstd.data[i] = s;
  }
}

// The weight gradient's order is the backend's, as layernorm_backward's.
void CpuBackend::rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight,
                                  Tensor rstd) {
  if (deterministic_) {
    rmsnorm_backward_rows<true>(dinp, dweight, dout, inp, weight, rstd);
  } else {
    rmsnorm_backward_rows<false>(dinp, dweight, dout, inp, weight, rstd);
  }
}

template <bool kByColumns>
void CpuBackend::rmsnorm_backward_rows(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight,
                                       Tensor rstd) {
  // dx = rstd * (g - xhat * mean(g * xhat)), g = dout * weight, xhat = x * rstd.
  const int64_t N = inp.rows(), C = inp.cols();
  const float* w = weight.data;
  float* partials = scratch(static_cast<size_t>(threads_ * C));
  int64_t ran = 1;
#pragma omp parallel num_threads(threads_)
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    if (tid == 0) ran = nt;
    float* dw = partials + tid * C;
    for (int64_t c = 0; c < C; ++c) dw[c] = 0.0f;
    for (int64_t i = N * tid / nt; i < N * (tid + 1) / nt; ++i) {
      const float* x = inp.data + i * C;
      const float* d = dout.data + i * C;
      float* dx = dinp.data + i * C;
      const float s = rstd.data[i];
      float gx_sum = 0.0f;
#pragma omp simd reduction(+ : gx_sum)
      for (int64_t c = 0; c < C; ++c) gx_sum += d[c] * w[c] * x[c] * s;
      const float gx_mean = gx_sum / static_cast<float>(C);
      if constexpr (kByColumns) {  // the weight gradient below, by columns
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          const float xhat = x[c] * s;
          dx[c] += s * (d[c] * w[c] - xhat * gx_mean);
        }
      } else {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          const float xhat = x[c] * s;
          dw[c] += xhat * d[c];
          dx[c] += s * (d[c] * w[c] - xhat * gx_mean);
        }
      }
    }
  }
  if constexpr (kByColumns) {
    norm_weight_columns<false>(dweight, Tensor{}, dout, inp, Tensor{}, rstd);
  } else {
    for (int64_t t = 0; t < ran; ++t) {
      const float* dw = partials + t * C;
      for (int64_t c = 0; c < C; ++c) dweight.data[c] += dw[c];
    }
  }
}

namespace {
// Turns the query and key heads of every row of x (rows of `width` floats,
// heads HS wide) by the row's angles; sign -1 turns back (the backward).
// The (cos, sin) table of the T positions is computed once, in double, into
// `table` (T * HS floats) and shared by the batch's rows and their heads.
void rotate(Tensor x, int NH, int KVH, int pos0, float theta, float sign, int threads, float* table) {
  const int64_t T = x.dim(1), rows = x.numel() / x.dim(x.ndim - 1), width = x.dim(x.ndim - 1);
  const int64_t HS = width / (NH + 2 * KVH), heads = NH + KVH, half = HS / 2;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const double pos = static_cast<double>(pos0 + t);
    float* cs = table + t * HS;
    for (int64_t i = 0; i < half; ++i) {
      const double angle = pos * std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / static_cast<double>(HS));
      cs[i] = static_cast<float>(std::cos(angle));
      cs[half + i] = sign * static_cast<float>(std::sin(angle));
    }
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* cs = table + (r % T) * HS;
    const float* sn = cs + half;
    float* row = x.data + r * width;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = row + h * HS;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * cs[i] - b * sn[i];
        v[2 * i + 1] = a * sn[i] + b * cs[i];
      }
    }
  }
}
}  // namespace

void CpuBackend::rope_forward(Tensor qkv, int NH, int KVH, int pos0, float theta) {
  const int64_t HS = qkv.dim(2) / (NH + 2 * KVH);
  rotate(qkv, NH, KVH, pos0, theta, 1.0f, threads_, scratch(static_cast<size_t>(qkv.dim(1) * HS)));
}

void CpuBackend::rope_backward(Tensor dqkv, int NH, int KVH, int pos0, float theta) {
  const int64_t HS = dqkv.dim(2) / (NH + 2 * KVH);
  rotate(dqkv, NH, KVH, pos0, theta, -1.0f, threads_, scratch(static_cast<size_t>(dqkv.dim(1) * HS)));
}

void CpuBackend::relu_forward(Tensor out, Tensor inp) {
  dispatch_dtype(out.dtype, [&](auto tag) {
    const int64_t n = inp.numel();
    const float* x = inp.data;
    auto* y = out.as<decltype(tag)>();
#pragma omp parallel for simd num_threads(threads_) schedule(static)
    for (int64_t i = 0; i < n; ++i) store(y, i, x[i] > 0.0f ? x[i] : 0.0f);
  });
}

void CpuBackend::relu_backward(Tensor dinp, Tensor dout, Tensor inp) {
  const int64_t n = inp.numel();
  const float* x = inp.data;
  const float* dy = dout.data;
  float* dx = dinp.data;
#pragma omp parallel for simd num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

void CpuBackend::silu_forward(Tensor out, Tensor inp) {
  dispatch_dtype(out.dtype, [&](auto tag) {
    const int64_t n = inp.numel();
    const float* x = inp.data;
    auto* y = out.as<decltype(tag)>();
#pragma omp parallel for simd num_threads(threads_) schedule(static)
    for (int64_t i = 0; i < n; ++i) store(y, i, x[i] * sigmoid(x[i]));
  });
}

void CpuBackend::silu_backward(Tensor dinp, Tensor dout, Tensor inp) {
  const int64_t n = inp.numel();
  const float* x = inp.data;
  const float* dy = dout.data;
  float* dx = dinp.data;
#pragma omp parallel for simd num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float s = sigmoid(x[i]);
    dx[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
  }
}

void CpuBackend::swiglu_forward(Tensor out, Tensor inp) {
  dispatch_dtype(out.dtype, [&](auto tag) {
    const int64_t N = out.numel() / out.dim(out.ndim - 1), H = out.dim(out.ndim - 1);
    auto* y_all = out.as<decltype(tag)>();
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int64_t r = 0; r < N; ++r) {
      const float* g = inp.data + r * 2 * H;
      const float* u = g + H;
      auto* y = y_all + r * H;
#pragma omp simd
      for (int64_t i = 0; i < H; ++i) store(y, i, g[i] * sigmoid(g[i]) * u[i]);
    }
  });
}

void CpuBackend::swiglu_backward(Tensor dinp, Tensor dout, Tensor inp) {
  const int64_t N = dout.numel() / dout.dim(dout.ndim - 1), H = dout.dim(dout.ndim - 1);
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const float* g = inp.data + r * 2 * H;
    const float* u = g + H;
    const float* dy = dout.data + r * H;
    float* dg = dinp.data + r * 2 * H;
    float* du = dg + H;
#pragma omp simd
    for (int64_t i = 0; i < H; ++i) {
      const float s = sigmoid(g[i]);
      du[i] = dy[i] * g[i] * s;
      dg[i] = dy[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
    }
  }
}

}  // namespace gpt2::cpu
