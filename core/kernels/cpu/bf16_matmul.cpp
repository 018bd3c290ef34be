// Bf16Matmul over oneDNN's matmul primitive (see bf16_matmul.h).
#include "kernels/cpu/bf16_matmul.h"

#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <bit>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "util/signal_stack.h"

namespace gpt2::cpu {

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

enum class Product { kForward, kForwardBias, kInput, kWeight };

// One product at one shape: its primitive, the memory objects whose data
// handles each call points at the caller's arrays, and the execution's
// argument map over them (made once: a call allocates nothing).
struct Entry {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  dnnl::memory src, weights, bias, dst;
  std::unordered_map<int, dnnl::memory> args;
};

// Whether oneDNN can run a bf16 matmul on this CPU. oneDNN 2.6's bf16
// products need AVX-512 (avx512_core; native dot products with
// AVX512-BF16): on an AVX2-only CPU making the primitive fails ("could not
// create a primitive descriptor iterator"). Probed once per process.
bool onednn_bf16() {
  static const bool available = [] {
    try {
      const dnnl::engine engine{dnnl::engine::kind::cpu, 0};
      const dnnl::memory::desc a({2, 2}, dt::bf16, tag::ab), d({2, 2}, dt::f32, tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, d), engine);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

// Where oneDNN has no bf16 matmul: the same arithmetic through OpenBLAS.
// Every bf16 is a float and a product of two bf16 is exact in fp32 (8 + 8
// significand bits), so converting the operands and running SGEMM gives the
// bf16 product with fp32 sums, as oneDNN's converting path does, up to the
// order of those sums.
constexpr const char* kFallbackInfo = "openblas sgemm on bf16 values (oneDNN has no bf16 matmul for this CPU)";

// m x n strided bf16 into a row-major (m,n) float array.
void widen(std::vector<float>& to, const bf16* from, int64_t m, int64_t n, int64_t row_stride, int64_t col_stride) {
  if (to.size() < static_cast<size_t>(m * n)) to.resize(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) to[static_cast<size_t>(i * n + j)] = to_float(from[i * row_stride + j * col_stride]);
  }
}

// Rows of the fallback's output per tile: fixed, whatever the thread count,
// so that each element is computed by the same SGEMM call at any number of
// threads (train.deterministic compares 1 and 2 threads bit for bit).
constexpr int64_t kFallbackRows = 256;

}  // namespace

struct Bf16Matmul::Impl {
  int threads = 1;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<std::tuple<Product, int64_t, int64_t, int64_t>, Entry> cache;
  const Entry* last = nullptr;  // the product run last (impl_info)
  bool signal_stacks = false;  // the team's alternate signal stacks made (ensure_team_signal_stacks)
  std::vector<float> a32, b32;   // the fallback's fp32 operands (grown, never shrunk)

  // The fallback (onednn_bf16() false): dst (M,Nn) = A (M,K) B + beta dst,
  // B given as (Nn,K) when b_transposed, else (K,Nn); tiles of
  // kFallbackRows output rows on `threads` threads, OpenBLAS on one each.
  void sgemm(float* dst, const float* A, const float* B, bool b_transposed, int64_t M, int64_t K, int64_t Nn,
             float beta) {
    const int64_t tiles = (M + kFallbackRows - 1) / kFallbackRows;
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t i0 = t * kFallbackRows, rows = std::min(kFallbackRows, M - i0);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, b_transposed ? CblasTrans : CblasNoTrans, static_cast<int>(rows),
                  static_cast<int>(Nn), static_cast<int>(K), 1.0f, A + i0 * K, static_cast<int>(K), B,
                  static_cast<int>(b_transposed ? K : Nn), beta, dst + i0 * Nn, static_cast<int>(Nn));
    }
  }

  // The product `p` as a matmul of src (M,K) and weights (K,Nn) into dst
  // (M,Nn): each operand's dims and the layout of the caller's array.
  Entry& entry(Product p, int64_t M, int64_t K, int64_t Nn, tag src_tag, tag w_tag, bool accumulate) {
    const auto key = std::make_tuple(p, M, K, Nn);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    const dnnl::memory::desc src({M, K}, dt::bf16, src_tag), w({K, Nn}, dt::bf16, w_tag), dst({M, Nn}, dt::f32, tag::ab);
    const dnnl::memory::desc bias = p == Product::kForwardBias ? dnnl::memory::desc({1, Nn}, dt::f32, tag::ab)
                                                               : dnnl::memory::desc();
    dnnl::primitive_attr attr;
    if (accumulate) {  // dst += product
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, w, bias, dst), attr, engine);
    Entry e{pd, dnnl::matmul(pd), dnnl::memory(src, engine, nullptr), dnnl::memory(w, engine, nullptr),
            dnnl::memory(), dnnl::memory(dst, engine, nullptr), {}};
    // The map holds handles to the same memory objects: set_data_handle on e.src reaches it.
    e.args = {{DNNL_ARG_SRC, e.src}, {DNNL_ARG_WEIGHTS, e.weights}, {DNNL_ARG_DST, e.dst}};
    if (p == Product::kForwardBias) {
      e.bias = dnnl::memory(bias, engine, nullptr);
      e.args.emplace(DNNL_ARG_BIAS, e.bias);
    }
    return cache.emplace(key, std::move(e)).first->second;
  }

  void run(Entry& e, const void* src, const void* w, const float* bias, float* dst) {
    e.src.set_data_handle(const_cast<void*>(src));
    e.weights.set_data_handle(const_cast<void*>(w));
    e.dst.set_data_handle(dst);
    if (bias != nullptr) e.bias.set_data_handle(const_cast<float*>(bias));
    if (!signal_stacks) ensure_team_signal_stacks(threads);  // its jit kernels may move the stack pointer (gemm.h)
    signal_stacks = true;
    omp_set_num_threads(threads);  // oneDNN (built with OpenMP) runs on the default team size
    e.prim.execute(stream, e.args);
    stream.wait();
    last = &e;
  }
};

Bf16Matmul::Bf16Matmul(int threads) : impl_(std::make_unique<Impl>()) {
  if (threads < 1) throw std::invalid_argument(fmt::format("Bf16Matmul: threads must be >= 1, got {}", threads));
  impl_->threads = threads;
}

Bf16Matmul::~Bf16Matmul() = default;

void Bf16Matmul::forward(float* out, const bf16* inp, const bf16* weight, const float* bias, int64_t N, int64_t C,
                         int64_t OC) {
  if (!onednn_bf16()) {
    widen(impl_->a32, inp, N, C, C, 1);
    widen(impl_->b32, weight, OC, C, C, 1);
    if (bias != nullptr) {  // the bias filled in, then beta 1 (as the fp32 matmul_forward)
      for (int64_t i = 0; i < N; ++i) std::copy_n(bias, OC, out + i * OC);
    }
    impl_->sgemm(out, impl_->a32.data(), impl_->b32.data(), true, N, C, OC, bias != nullptr ? 1.0f : 0.0f);
    return;
  }
  // src inp (N,C); weights weight^T (C,OC): the (OC,C) row-major array read column-major.
  Entry& e = impl_->entry(bias ? Product::kForwardBias : Product::kForward, N, C, OC, tag::ab, tag::ba, false);
  impl_->run(e, inp, weight, bias, out);
}

void Bf16Matmul::backward_input(float* dinp, const bf16* dout, const bf16* weight, int64_t N, int64_t C, int64_t OC) {
  if (!onednn_bf16()) {
    widen(impl_->a32, dout, N, OC, OC, 1);
    widen(impl_->b32, weight, OC, C, C, 1);
    impl_->sgemm(dinp, impl_->a32.data(), impl_->b32.data(), false, N, OC, C, 0.0f);
    return;
  }
  // src dout (N,OC); weights weight (OC,C) as it is.
  Entry& e = impl_->entry(Product::kInput, N, OC, C, tag::ab, tag::ab, false);
  impl_->run(e, dout, weight, nullptr, dinp);
}

void Bf16Matmul::backward_weight(float* dweight, const bf16* dout, const bf16* inp, int64_t N, int64_t C,
                                 int64_t OC) {
  if (!onednn_bf16()) {
    widen(impl_->a32, dout, OC, N, 1, OC);  // dout^T (OC,N)
    widen(impl_->b32, inp, N, C, C, 1);
    impl_->sgemm(dweight, impl_->a32.data(), impl_->b32.data(), false, OC, N, C, 1.0f);
    return;
  }
  // src dout^T (OC,N): the (N,OC) row-major array read column-major; weights inp (N,C); dst += (OC,C).
  Entry& e = impl_->entry(Product::kWeight, OC, N, C, tag::ba, tag::ab, true);
  impl_->run(e, dout, inp, nullptr, dweight);
}

struct Bf16TileGemm::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  // (m, n, k, A's strides, B's strides, ldd, alpha's bits, accumulate)
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, uint32_t, bool>;
  std::map<Key, Entry> cache;
  const Entry* last = nullptr;
  std::vector<float> a32, b32;  // the fallback's fp32 operands
};

Bf16TileGemm::Bf16TileGemm() : impl_(std::make_unique<Impl>()) {}
Bf16TileGemm::~Bf16TileGemm() = default;

void Bf16TileGemm::run(float* dst, int64_t ldd, Operand a, Operand b, int64_t m, int64_t n, int64_t k, float alpha,
                       bool accumulate) {
  if (!onednn_bf16()) {  // on this thread: the backend keeps OpenBLAS at one thread
    widen(impl_->a32, a.data, m, k, a.row_stride, a.col_stride);
    widen(impl_->b32, b.data, k, n, b.row_stride, b.col_stride);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, impl_->a32.data(), static_cast<int>(k), impl_->b32.data(),
                static_cast<int>(n), accumulate ? 1.0f : 0.0f, dst, static_cast<int>(ldd));
    return;
  }
  // alpha is applied here after the product, not as oneDNN's output scale:
  // its gemm-based matmul (the one these strided tiles get) applies an output
  // scale in a scalar pass, which made the attention's score tiles 6x slower
  // (52 us against 8 a call at 64 x 64 x 128 here). The product once
  // rounded, times alpha once rounded, as the output scale computes it.
  const bool scaled = alpha != 1.0f;
  if (scaled && accumulate) throw std::invalid_argument("Bf16TileGemm: alpha with accumulate");
  const Impl::Key key{
      m, n, k, a.row_stride, a.col_stride, b.row_stride, b.col_stride, ldd, std::bit_cast<uint32_t>(1.0f), accumulate};
  auto it = impl_->cache.find(key);
  if (it == impl_->cache.end()) {
    const dnnl::memory::desc src({m, k}, dt::bf16, {a.row_stride, a.col_stride});
    const dnnl::memory::desc w({k, n}, dt::bf16, {b.row_stride, b.col_stride});
    const dnnl::memory::desc d({m, n}, dt::f32, {ldd, 1});
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, w, d), attr, impl_->engine);
    Entry e{pd, dnnl::matmul(pd), dnnl::memory(src, impl_->engine, nullptr), dnnl::memory(w, impl_->engine, nullptr),
            dnnl::memory(), dnnl::memory(d, impl_->engine, nullptr), {}};
    e.args = {{DNNL_ARG_SRC, e.src}, {DNNL_ARG_WEIGHTS, e.weights}, {DNNL_ARG_DST, e.dst}};
    it = impl_->cache.emplace(key, std::move(e)).first;
  }
  Entry& e = it->second;
  e.src.set_data_handle(const_cast<bf16*>(a.data));
  e.weights.set_data_handle(const_cast<bf16*>(b.data));
  e.dst.set_data_handle(dst);
  // On this thread alone. Inside a team of 1 (a 1-thread backend's region is
  // inactive) oneDNN would otherwise fork a team of the default size for
  // every tile; the setting is the calling task's, gone when its region ends
  // (outside any region it would outlive the call, so it is not made there).
  if (omp_get_level() > 0) omp_set_num_threads(1);
  ensure_signal_stack();  // its jit kernels may move the stack pointer into the heap (util/signal_stack.h)
  e.prim.execute(impl_->stream, e.args);
  impl_->stream.wait();
  impl_->last = &e;
  if (scaled) {
    for (int64_t i = 0; i < m; ++i) {
      float* row = dst + i * ldd;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) row[j] *= alpha;
    }
  }
}

std::string Bf16TileGemm::impl_info() const {
  if (!onednn_bf16()) return kFallbackInfo;
  return impl_->last ? impl_->last->pd.impl_info_str() : "";
}

std::string Bf16Matmul::impl_info() const {
  if (!onednn_bf16()) return kFallbackInfo;
  return impl_->last ? impl_->last->pd.impl_info_str() : "";
}

std::string Bf16Matmul::library_version() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
}

}  // namespace gpt2::cpu
