// LayerNorm on the CPU (eps 1e-5, biased variance as in PyTorch). Rows are
// independent; the weight and bias gradients sum over rows, so each thread
// keeps partial sums in scratch and they are added in thread order.
#include <omp.h>

#include <cmath>

#include "kernels/cpu/cpu_backend.h"

namespace gpt2::cpu {

void CpuBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                                   Tensor bias) {
  dispatch_dtype(out.dtype, [&](auto tag) { layernorm_rows(out.as<decltype(tag)>(), mean, rstd, inp, weight, bias); });
}

// out's element type: f32, or bf16 (the math in f32, one rounding at the store).
template <typename T>
void CpuBackend::layernorm_rows(T* out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias) {
  const int64_t N = inp.rows(), C = inp.cols();
  const float* w = weight.data;
  const float* bi = bias.data;
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp.data + i * C;
    T* o = out + i * C;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < C; ++c) sum += x[c];
    const float m = sum / static_cast<float>(C);
    float sq = 0.0f;  // two-pass variance: no cancellation for large means
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < C; ++c) sq += (x[c] - m) * (x[c] - m);
    const float s = 1.0f / std::sqrt(sq / static_cast<float>(C) + 1e-5f);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) store(o, c, (x[c] - m) * s * w[c] + bi[c]);
    mean.data[i] = m;
    rstd.data[i] = s;
  }
}

// The weight and bias gradients' order is the backend's, fixed when it was
// made: by columns under deterministic_ (norm_weight_columns), else per-thread
// partial sums. One dispatch here; the rows below test nothing.
void CpuBackend::layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                                    Tensor inp, Tensor weight, Tensor mean, Tensor rstd) {
  if (deterministic_) {
    layernorm_backward_rows<true>(dinp, dweight, dbias, dout, inp, weight, mean, rstd);
  } else {
    layernorm_backward_rows<false>(dinp, dweight, dbias, dout, inp, weight, mean, rstd);
  }
}

template <bool kByColumns>
void CpuBackend::layernorm_backward_rows(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                         Tensor weight, Tensor mean, Tensor rstd) {
  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * weight.
  const int64_t N = inp.rows(), C = inp.cols();
  const float* w = weight.data;
  float* partials = scratch(static_cast<size_t>(threads_ * 2 * C));
  int64_t ran = 1;  // threads the runtime granted (possibly fewer than asked)
#pragma omp parallel num_threads(threads_)
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    if (tid == 0) ran = nt;
    float* dw = partials + tid * 2 * C;
    float* db = dw + C;
    for (int64_t c = 0; c < 2 * C; ++c) dw[c] = 0.0f;
    for (int64_t i = N * tid / nt; i < N * (tid + 1) / nt; ++i) {
      const float* x = inp.data + i * C;
      const float* d = dout.data + i * C;
      float* dx = dinp.data + i * C;
      const float m = mean.data[i], s = rstd.data[i];
      float g_sum = 0.0f, gx_sum = 0.0f;
#pragma omp simd reduction(+ : g_sum, gx_sum)
      for (int64_t c = 0; c < C; ++c) {
        float g = d[c] * w[c];
        g_sum += g;
        gx_sum += g * (x[c] - m) * s;
      }
      const float g_mean = g_sum / static_cast<float>(C), gx_mean = gx_sum / static_cast<float>(C);
      if constexpr (kByColumns) {  // the weight and bias gradients below, by columns
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          float xhat = (x[c] - m) * s;
          dx[c] += s * (d[c] * w[c] - g_mean - xhat * gx_mean);
        }
      } else {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          float xhat = (x[c] - m) * s;
          db[c] += d[c];
          dw[c] += xhat * d[c];
          dx[c] += s * (d[c] * w[c] - g_mean - xhat * gx_mean);
        }
      }
    }
  }
  if constexpr (kByColumns) {
    norm_weight_columns<true>(dweight, dbias, dout, inp, mean, rstd);
  } else {
    for (int64_t t = 0; t < ran; ++t) {  // only the slots that were written
      const float* dw = partials + t * 2 * C;
      for (int64_t c = 0; c < C; ++c) {
        dweight.data[c] += dw[c];
        dbias.data[c] += dw[C + c];
      }
    }
  }
}

// Each thread owns a slab of columns and sums them over every row in row
// order, from zero, then adds the sum to the accumulated gradient: the same
// arithmetic as the row-parallel form's one-thread run, at any thread count.
// kLayerNorm: dweight += sum xhat dout and dbias += sum dout (mean and rstd);
// else RMSNorm's dweight += sum x rstd dout (dbias and mean unused).
template <bool kLayerNorm>
void CpuBackend::norm_weight_columns(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor mean, Tensor rstd) {
  if (pieces_.on()) return norm_columns_pieces<kLayerNorm>(dweight, dbias, dout, inp, mean, rstd);  // pieces.cpp
  const int64_t N = inp.rows(), C = inp.cols();
  float* partials = scratch(static_cast<size_t>(2 * C));
#pragma omp parallel num_threads(threads_)
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t c0 = C * tid / nt, c1 = C * (tid + 1) / nt;
    float* dw = partials;
    float* db = partials + C;
    for (int64_t c = c0; c < c1; ++c) dw[c] = db[c] = 0.0f;
    for (int64_t i = 0; i < N; ++i) norm_columns_row<kLayerNorm>(dw, db, dout, inp, mean, rstd, i, c0, c1);
    for (int64_t c = c0; c < c1; ++c) {
      dweight.data[c] += dw[c];
      if constexpr (kLayerNorm) dbias.data[c] += db[c];
    }
  }
}

template void CpuBackend::norm_weight_columns<true>(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor);
template void CpuBackend::norm_weight_columns<false>(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor);

}  // namespace gpt2::cpu
