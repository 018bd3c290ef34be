// CpuBackend: construction, thread set-up, and the element-wise kernels
// (embedding, GELU, residual, Adam, sum of squares). The heavier kernels are
// in layernorm.cpp, matmul.cpp, attention.cpp and crossentropy.cpp.
#include "kernels/cpu/cpu_backend.h"

#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/fast_math.h"

namespace gpt2 {

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& o) { return std::make_unique<cpu::CpuBackend>(o); }

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  BackendOptions o;
  o.threads = threads;
  return make_cpu_backend(o);
}

namespace cpu {

CpuBackend::CpuBackend(const BackendOptions& o)
    : threads_(o.threads),
      deterministic_(o.deterministic),
      column_tile_(o.column_tile > 0 ? o.column_tile : 256),
      pieces_(o.pieces),
      gemm_(o.gemm, o.deterministic, std::max(o.threads, 1), o.gemm_pins) {
  const int threads = o.threads, column_tile = o.column_tile;
  const bool deterministic = o.deterministic, bf16_products = o.bf16;
  const SequencePieces& pieces = o.pieces;
  if (threads < 1) throw std::invalid_argument(fmt::format("threads must be >= 1, got {}", threads));
  if (column_tile < 0) throw std::invalid_argument(fmt::format("column tile must be >= 0, got {}", column_tile));
  if (pieces.on()) {  // the configuration checked these (train/resolve/layout.h); a backend made by hand is checked here
    const int S = pieces.pieces;
    if (!deterministic || bf16_products || (S & (S - 1)) != 0 || pieces.held < 1 || S % (2 * pieces.held) != 0 ||
        pieces.T % S != 0) {
      throw std::invalid_argument(
          fmt::format("sequence pieces: {} pieces of T {}, {} pairs an arena, need "
                      "train.deterministic, fp32 products, a power of two dividing T and "
                      "whole pairs of chunks",
                      S, pieces.T, pieces.held));
    }
  }
  // One thread pool: OpenBLAS runs single-threaded inside our OpenMP
  // regions, which split each GEMM (matmul.cpp).
  openblas_set_num_threads(1);
  omp_set_num_threads(threads);
  if (bf16_products) {
    products_ = Dtype::bf16;
    onednn_ = std::make_unique<Bf16Matmul>(threads);
    // One small product now, so that name() says which kernel oneDNN chose on this CPU.
    std::vector<bf16> a(64 * 64, to_bf16(1.0f));
    std::vector<float> out(64 * 64);
    onednn_->forward(out.data(), a.data(), a.data(), nullptr, 64, 64, 64);
  }
}

std::string CpuBackend::name() const {
  std::string extras;
  if (onednn_) extras = fmt::format("bf16 products: oneDNN {} {}", Bf16Matmul::library_version(), onednn_->impl_info());
  if (deterministic_) {  // and the fp32 products' provider, which decides the bits (gemm.h deterministic_provider)
    extras += std::string(extras.empty() ? "" : ", ") +
              fmt::format("deterministic, fp32 products: {}", to_string(*gemm_.fixed()));
  }
  return extras.empty() ? "cpu" : fmt::format("cpu ({})", extras);
}

std::vector<std::pair<std::string, std::string>> CpuBackend::library_versions() const {
  // oneDNN runs fp32 products too (train.gemm), so its version is always named.
  std::vector<std::pair<std::string, std::string>> v{{"onednn", Bf16Matmul::library_version()},
                                                     {"gemm", to_string(gemm_.mode())}};
  if (onednn_) v.emplace_back("onednn_matmul", onednn_->impl_info());
  return v;
}

std::vector<std::pair<std::string, std::string>> CpuBackend::product_choices() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const GemmDecision& d : gemm_.decisions()) out.emplace_back(d.shape.text(), to_string(d.provider));
  return out;
}

const bf16* CpuBackend::as_bf16(std::vector<bf16>& to, Tensor from) {
  if (from.is_bf16()) return from.as<bf16>();  // stored in bf16 already: nothing to convert
  const size_t n = static_cast<size_t>(from.numel());
  if (to.size() < n) to.resize(n);
  to_bf16(std::span<const float>(from.data, n), std::span<bf16>(to.data(), n), threads_);
  return to.data();
}

void CpuBackend::ready_tile_products(size_t tile) {
  while (tile_gemm_.size() < static_cast<size_t>(threads_)) tile_gemm_.push_back(std::make_unique<Bf16TileGemm>());
  const size_t n = static_cast<size_t>(threads_) * 2 * tile;
  if (tile16_.size() < n) tile16_.resize(n);
}

float* CpuBackend::scratch(size_t n) {
  if (scratch_.size() < n) scratch_ = Buffer(n);
  return scratch_.data();
}

void CpuBackend::zero(Tensor x) {
  const int64_t n = x.numel();
  float* d = x.data;
#pragma omp parallel for simd num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < n; ++i) d[i] = 0.0f;
}

void CpuBackend::copy(Tensor dst, Tensor src) {
  std::memcpy(dst.data, src.data, static_cast<size_t>(src.numel()) * sizeof(float));
}

void CpuBackend::encoder_forward(Tensor out, const int32_t* tokens, Tensor wte, Tensor wpe) {
  const int64_t B = out.dim(0), T = out.dim(1), C = out.dim(2);
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    float* o = out.data + bt * C;
    const float* pe = wpe.data + (bt % T) * C;
    if (tokens[bt] < 0) {  // a token of another vocabulary shard: the position row alone
      std::memcpy(o, pe, static_cast<size_t>(C) * sizeof(float));
      continue;
    }
    const float* te = wte.data + static_cast<int64_t>(tokens[bt]) * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = te[c] + pe[c];
  }
}

void CpuBackend::encoder_backward(Tensor dwte, Tensor dwpe, Tensor dout, const int32_t* tokens) {
  // Threads own disjoint column ranges, so repeated tokens never race and the
  // summation order over positions is fixed.
  const int64_t B = dout.dim(0), T = dout.dim(1), C = dout.dim(2);
#pragma omp parallel num_threads(threads_)
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t c0 = C * tid / nt, c1 = C * (tid + 1) / nt;
    for (int64_t bt = 0; bt < B * T; ++bt) {
      const float* d = dout.data + bt * C;
      float* dpe = dwpe.data + (bt % T) * C;
      if (tokens[bt] < 0 || dwte.data == nullptr) {  // a token of another vocabulary shard, or no token table
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) dpe[c] += d[c];
        continue;
      }
      float* dte = dwte.data + static_cast<int64_t>(tokens[bt]) * C;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) {
        dte[c] += d[c];
        dpe[c] += d[c];
      }
    }
  }
}

namespace {
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;
}  // namespace

void CpuBackend::gelu_forward(Tensor out, Tensor inp) {
  dispatch_dtype(out.dtype, [&](auto tag) {
    const int64_t n = inp.numel();
    const float* x = inp.data;
    auto* y = out.as<decltype(tag)>();
#pragma omp parallel for simd num_threads(threads_) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float u = kGeluK * (x[i] + kGeluA * x[i] * x[i] * x[i]);
      store(y, i, 0.5f * x[i] * (1.0f + fast_tanh(u)));
    }
  });
}

void CpuBackend::gelu_backward(Tensor dinp, Tensor dout, Tensor inp) {
  const int64_t n = inp.numel();
  const float* x = inp.data;
  const float* dy = dout.data;
  float* dx = dinp.data;
#pragma omp parallel for simd num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float u = kGeluK * (x[i] + kGeluA * x[i] * x[i] * x[i]);
    float th = fast_tanh(u);
    float du = kGeluK * (1.0f + 3.0f * kGeluA * x[i] * x[i]);
    float grad = 0.5f * (1.0f + th) + 0.5f * x[i] * (1.0f - th * th) * du;
    dx[i] = grad * dy[i];
  }
}

void CpuBackend::residual_forward(Tensor out, Tensor a, Tensor b) {
  const int64_t n = a.numel();
  float* o = out.data;
  const float* x = a.data;
  const float* y = b.data;
#pragma omp parallel for simd num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

void CpuBackend::adam_update(Tensor param, Tensor grad, Tensor m, Tensor v,
                             const AdamCoefficients& k) {
  const int64_t n = param.numel();
  float* p = param.data;
  const float* g = grad.data;
  float* mm = m.data;
  float* vv = v.data;
#pragma omp parallel for simd num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i] * k.grad_scale;
    mm[i] = k.beta1 * mm[i] + (1.0f - k.beta1) * gi;
    vv[i] = k.beta2 * vv[i] + (1.0f - k.beta2) * gi * gi;
    p[i] = p[i] * k.decay_factor - k.step_size * mm[i] / (std::sqrt(vv[i]) * k.v_scale + k.eps);
  }
}

double CpuBackend::sum_squares(Tensor x) {
  const int64_t n = x.numel();
  const float* d = x.data;
  if (deterministic_) {
    // Fixed chunks of kSumChunk elements, each summed in element order (by
    // whichever thread), the chunks' sums then added in chunk order: the same
    // bits at any thread count.
    constexpr int64_t kSumChunk = int64_t{1} << 16;
    const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
    if (chunk_sums_.size() < static_cast<size_t>(chunks)) chunk_sums_.resize(static_cast<size_t>(chunks));
    double* sums = chunk_sums_.data();
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
      double acc = 0;
      for (int64_t i = k * kSumChunk; i < std::min(n, (k + 1) * kSumChunk); ++i) acc += static_cast<double>(d[i]) * d[i];
      sums[k] = acc;
    }
    double total = 0;
    for (int64_t k = 0; k < chunks; ++k) total += sums[k];
    return total;
  }
  double partial[256] = {};  // one slot per thread, summed in thread order
  const int nt = std::min(threads_, 256);
#pragma omp parallel num_threads(nt)
  {
    const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t i0 = n * t / T, i1 = n * (t + 1) / T;
    double acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = i0; i < i1; ++i) acc += static_cast<double>(d[i]) * d[i];
    partial[t] = acc;
  }
  double total = 0;
  for (int t = 0; t < nt; ++t) total += partial[t];
  return total;
}

}  // namespace cpu
}  // namespace gpt2
