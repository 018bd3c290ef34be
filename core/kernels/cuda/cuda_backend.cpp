#include "kernels/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/token_buckets.h"

namespace gpt2 {

namespace {

// Device memory of one GPU; fills and copies are ordered on the backend's
// stream, so they need no synchronisation with the kernels around them.
class CudaMemory final : public Memory {
 public:
  CudaMemory(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  std::string name() const override { return fmt::format("cuda:{}", device_); }
  bool is_host() const override { return false; }
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t rc = cudaMalloc(&p, bytes);
    if (rc != cudaSuccess) {
      throw std::runtime_error(fmt::format("out of device memory allocating {:.1f} MiB on cuda:{}: {}",
                                           static_cast<double>(bytes) / (1 << 20), device_, cudaGetErrorString(rc)));
    }
    GPT2_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
    return p;
  }
  void release(void* p) override { cudaFree(p); }  // called from destructors: must not throw
  void zero(void* p, size_t bytes) override { GPT2_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_)); }
  void upload(void* dst, const void* src, size_t bytes) override {
    GPT2_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    GPT2_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void download(void* dst, const void* src, size_t bytes) override {
    GPT2_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    GPT2_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  int device_;
  cudaStream_t stream_;
};

// A grow-only device allocation for a kernel's scratch or staged host data:
// after the first step it never allocates again.
class Scratch {
 public:
  explicit Scratch(Memory& memory) : memory_(memory) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    if (p_) memory_.release(p_);
  }
  template <typename T>
  T* get(size_t count) {
    const size_t need = std::max<size_t>(count, 1) * sizeof(T);
    if (need > bytes_) {
      if (p_) memory_.release(p_);  // cudaFree waits for the kernels still using it
      p_ = nullptr;
      bytes_ = 0;  // consistent if the allocation below throws
      p_ = memory_.allocate(need);
      bytes_ = need;
    }
    return static_cast<T*>(p_);
  }

 private:
  Memory& memory_;
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaOptions& opt, int device_count)
      : tf32_(opt.tf32), products_(opt.bf16 ? Dtype::bf16 : Dtype::f32) {
    device_ = opt.device_hint % device_count;
    GPT2_CUDA_CHECK(cudaSetDevice(device_));
    GPT2_CUDA_CHECK(cudaGetDeviceProperties(&prop_, device_));
    GPT2_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    GPT2_CUBLAS_CHECK(cublasCreate(&blas_));
    GPT2_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    GPT2_CUBLAS_CHECK(cublasSetMathMode(blas_, tf32_ ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    memory_ = std::make_unique<CudaMemory>(device_, stream_);
    for (auto* s : {&norm_scratch_, &bias_scratch_, &att_scratch_, &reduce_scratch_, &tokens_, &targets_, &buckets_,
                    &bf16_a_, &bf16_b_, &bf16_c_}) {
      s->emplace(*memory_);
    }
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    for (auto* s : {&norm_scratch_, &bias_scratch_, &att_scratch_, &reduce_scratch_, &tokens_, &targets_, &buckets_,
                    &bf16_a_, &bf16_b_, &bf16_c_}) {
      s->reset();
    }
    cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override {
    return fmt::format("cuda ({}, sm_{}{}{}{})", prop_.name, prop_.major, prop_.minor, tf32_ ? ", TF32" : "",
                       products_ == Dtype::bf16 ? ", bf16 products" : "");
  }
  std::vector<std::pair<std::string, std::string>> library_versions() const override {
    auto cuda_version = [](int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); };
    std::vector<std::pair<std::string, std::string>> out;
    int v = 0;
    if (cudaRuntimeGetVersion(&v) == cudaSuccess) out.emplace_back("cuda_runtime", cuda_version(v));
    if (cudaDriverGetVersion(&v) == cudaSuccess) out.emplace_back("cuda_driver", cuda_version(v));
    if (cublasGetVersion(blas_, &v) == CUBLAS_STATUS_SUCCESS) {
      out.emplace_back("cublas", fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100));
    }
    return out;
  }
  Memory& memory() override { return *memory_; }
  void synchronize() override { GPT2_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }

  Dtype products() const override { return products_; }

  double ceiling_gflops(int ranks, int ranks_per_machine) {
    // A large product on this GPU, best of five after a warm-up: FP32, or
    // with bf16 products a bf16 one (fp32 sums), the MFU peak of such a run.
    constexpr int n = 4096;
    Buffer a(static_cast<size_t>(n) * n, *memory_), b(a.size(), *memory_), c(a.size(), *memory_);
    cudaEvent_t e0, e1;
    GPT2_CUDA_CHECK(cudaEventCreate(&e0));
    GPT2_CUDA_CHECK(cudaEventCreate(&e1));
    float best_ms = 1e30f;
    for (int rep = 0; rep < 6; ++rep) {
      GPT2_CUDA_CHECK(cudaEventRecord(e0, stream_));
      // With bf16 products a and b's first halves are n x n bf16 matrices (their bits are whatever: zeros).
      gemm(CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, a.data(), n, b.data(), n, 0.0f, c.data(), n);
      GPT2_CUDA_CHECK(cudaEventRecord(e1, stream_));
      GPT2_CUDA_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      GPT2_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      if (rep > 0) best_ms = std::min(best_ms, ms);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    // The GPUs in use: on each machine, min(its ranks, its GPUs) (ranks bind
    // local rank % GPUs, so ranks beyond the GPU count share them).
    const int machines = std::max(1, ranks / std::max(1, ranks_per_machine));
    int devices = 0;
    GPT2_CUDA_CHECK(cudaGetDeviceCount(&devices));
    const int gpus = machines * std::min(std::max(1, ranks_per_machine), devices);
    return gpus * 2.0 * n * n * static_cast<double>(n) / (best_ms * 1e-3) / 1e9;
  }

  void zero(Tensor x) override { memory_->zero(x.data, static_cast<size_t>(x.numel()) * sizeof(float)); }
  void copy(Tensor dst, Tensor src) override {
    GPT2_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(src.numel()) * sizeof(float),
                                    cudaMemcpyDeviceToDevice, stream_));
  }

  void encoder_forward(Tensor out, const int32_t* tokens, Tensor wte, Tensor wpe) override {
    const int B = static_cast<int>(out.dim(0)), T = static_cast<int>(out.dim(1)), C = static_cast<int>(out.dim(2));
    const int32_t* d = stage(*tokens_, tokens, static_cast<size_t>(B) * T);
    cuda::encoder_forward(out.data, d, wte.data, wpe.data, B * T, T, C, stream_);
  }

  void encoder_backward(Tensor dwte, Tensor dwpe, Tensor dout, const int32_t* tokens) override {
    const int B = static_cast<int>(dout.dim(0)), T = static_cast<int>(dout.dim(1)), C = static_cast<int>(dout.dim(2));
    const int V = static_cast<int>(dwte.dim(0));
    const int N = B * T;
    cuda::encoder_backward_wpe(dwpe.data, dout.data, B, T, C, stream_);
    // Group the positions by token on the host (a stable counting sort) so
    // that each row of dwte is summed by one thread block, in order; the
    // three arrays travel in one copy.
    cuda::make_token_buckets(tokens, N, V, groups_);
    const int nb = groups_.num_buckets();
    packed_.clear();
    for (const std::vector<int32_t>* v : {&groups_.bucket_token, &groups_.starts, &groups_.order}) {
      packed_.insert(packed_.end(), v->begin(), v->end());
    }
    const int32_t* d = stage(*buckets_, packed_.data(), packed_.size());
    cuda::encoder_backward_wte(dwte.data, dout.data, d, d + nb, d + 2 * nb + 1, nb, C, stream_);
  }

  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias) override {
    cuda::layernorm_forward(out.data, mean.data, rstd.data, inp.data, weight.data, bias.data, rows(inp), cols(inp),
                            stream_);
  }
  void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                          Tensor mean, Tensor rstd) override {
    const int N = rows(inp), C = cols(inp);
    float* scratch = norm_scratch_->get<float>(cuda::layernorm_backward_scratch_floats(N, C));
    cuda::layernorm_backward(dinp.data, dweight.data, dbias.data, scratch, dout.data, inp.data, weight.data,
                             mean.data, rstd.data, N, C, stream_);
  }
  void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight) override {
    cuda::rmsnorm_forward(out.data, rstd.data, inp.data, weight.data, rows(inp), cols(inp), stream_);
  }
  void rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight,
                        Tensor rstd) override {
    const int N = rows(inp), C = cols(inp);
    float* scratch = norm_scratch_->get<float>(cuda::rmsnorm_backward_scratch_floats(N, C));
    cuda::rmsnorm_backward(dinp.data, dweight.data, scratch, dout.data, inp.data, weight.data, rstd.data, N, C,
                           stream_);
  }

  // Row-major products through column-major cuBLAS: a row-major (R,K) matrix
  // is a column-major (K,R) one, so every product is computed transposed.
  void matmul_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) override {
    const int N = rows(inp), C = cols(inp), OC = static_cast<int>(weight.dim(0));
    // out^T (OC,N) = W (OC,C) . inp^T (C,N)
    const void* w = operand(weight, *bf16_b_);
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, w, C, operand(inp, *bf16_a_), C, 0.0f, out.data,
         OC);
    if (!bias.empty()) cuda::add_bias(out.data, bias.data, N, OC, stream_);
  }
  void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight) override {
    const int N = rows(inp), C = cols(inp), OC = static_cast<int>(weight.dim(0));
    // dout as the products read it (with bf16 products its bf16 copy, converted once for both).
    const void* d = dinp.data != nullptr || dweight.data != nullptr
                        ? operand(dout, *bf16_a_) : nullptr;
    // dinp^T (C,N) = W^T (C,OC) . dout^T (OC,N)
    if (dinp.data != nullptr) {
      gemm(CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, operand(weight, *bf16_b_), C, d, OC, 0.0f,
           dinp.data, C);
    }
    // dW^T (C,OC) += inp^T (C,N) . dout (N,OC)
    if (dweight.data != nullptr) {
      gemm(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, operand(inp, *bf16_c_), C, d, OC, 1.0f,
           dweight.data, C);
    }
    if (!dbias.empty()) {
      float* scratch = bias_scratch_->get<float>(cuda::bias_backward_scratch_floats(N, OC));
      cuda::bias_backward(dbias.data, scratch, dout.data, N, OC, stream_);
    }
  }

  // C = NH * HS is out's width (backend.h: HS = out.dim(2) / NH); the
  // launchers take qkv's (NH + 2 KVH) HS from NH, KVH and HS.
  void attention_forward(Tensor out, Tensor lse, Tensor qkv, int NH, int KVH) override {
    const int B = static_cast<int>(qkv.dim(0)), T = static_cast<int>(qkv.dim(1));
    cuda::attention_forward(out.data, lse.data, qkv.data, B, T, cols(out), NH, KVH, 0, stream_);
  }
  void attention_backward(Tensor dqkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv, int NH, int KVH) override {
    const int B = static_cast<int>(qkv.dim(0)), T = static_cast<int>(qkv.dim(1));
    float* scratch = att_scratch_->get<float>(cuda::attention_backward_scratch_floats(B, T, NH));
    cuda::attention_backward(dqkv.data, scratch, dout.data, out.data, lse.data, qkv.data, B, T, cols(out), NH,
                             KVH, stream_);
  }
  void attention_decode(Tensor out, Tensor qkv, int NH, int KVH) override {
    const int P = static_cast<int>(qkv.dim(1));
    cuda::attention_forward(out.data, nullptr, qkv.data, 1, P, cols(out), NH, KVH, P - 1, stream_);
  }

  // HS = qkv's width / (NH + 2 KVH).
  void rope_forward(Tensor qkv, int NH, int KVH, int pos0, float theta) override {
    rope(qkv, NH, KVH, pos0, theta, false);
  }
  void rope_backward(Tensor dqkv, int NH, int KVH, int pos0, float theta) override {
    rope(dqkv, NH, KVH, pos0, theta, true);
  }

  void gelu_forward(Tensor out, Tensor inp) override { cuda::gelu_forward(out.data, inp.data, inp.numel(), stream_); }
  void gelu_backward(Tensor dinp, Tensor dout, Tensor inp) override {
    cuda::gelu_backward(dinp.data, dout.data, inp.data, inp.numel(), stream_);
  }
  void relu_forward(Tensor out, Tensor inp) override { cuda::relu_forward(out.data, inp.data, inp.numel(), stream_); }
  void relu_backward(Tensor dinp, Tensor dout, Tensor inp) override {
    cuda::relu_backward(dinp.data, dout.data, inp.data, inp.numel(), stream_);
  }
  void silu_forward(Tensor out, Tensor inp) override { cuda::silu_forward(out.data, inp.data, inp.numel(), stream_); }
  void silu_backward(Tensor dinp, Tensor dout, Tensor inp) override {
    cuda::silu_backward(dinp.data, dout.data, inp.data, inp.numel(), stream_);
  }
  // inp (N,2H), out and dout (N,H).
  void swiglu_forward(Tensor out, Tensor inp) override {
    cuda::swiglu_forward(out.data, inp.data, rows(inp), cols(inp) / 2, stream_);
  }
  void swiglu_backward(Tensor dinp, Tensor dout, Tensor inp) override {
    cuda::swiglu_backward(dinp.data, dout.data, inp.data, rows(inp), cols(inp) / 2, stream_);
  }
  void residual_forward(Tensor out, Tensor a, Tensor b) override {
    cuda::residual_forward(out.data, a.data, b.data, a.numel(), stream_);
  }

  void crossentropy_forward(Tensor losses, Tensor logits, const int32_t* targets) override {
    const int N = rows(logits), V = cols(logits);
    cuda::crossentropy_forward(losses.data, logits.data, stage(*targets_, targets, static_cast<size_t>(N)), N, V,
                               stream_);
  }
  void crossentropy_backward(Tensor dlogits, Tensor logits, const int32_t* targets, float dloss) override {
    const int N = rows(logits), V = cols(logits);
    cuda::crossentropy_backward(dlogits.data, logits.data, stage(*targets_, targets, static_cast<size_t>(N)), dloss,
                                N, V, stream_);
  }

  void crossentropy_shard_stats(Tensor lse, Tensor target_logit, Tensor logits, const int32_t* targets, int64_t v0,
                                int64_t vocab) override {
    const int N = rows(logits), W = cols(logits);
    cuda::crossentropy_shard_stats(lse.data, target_logit.data, logits.data,
                                   stage(*targets_, targets, static_cast<size_t>(N)), N, W, v0, vocab, stream_);
  }
  void crossentropy_shard_combine(Tensor losses, Tensor lse, Tensor parts) override {
    cuda::crossentropy_shard_combine(losses.data, lse.data, parts.data, static_cast<int>(parts.dim(0) - 1),
                                     static_cast<int>(parts.dim(1)), stream_);
  }
  void crossentropy_shard_backward(Tensor dlogits, Tensor logits, Tensor lse, const int32_t* targets, int64_t v0,
                                   int64_t vocab, float dloss) override {
    const int N = rows(logits), W = cols(logits);
    cuda::crossentropy_shard_backward(dlogits.data, logits.data, lse.data,
                                      stage(*targets_, targets, static_cast<size_t>(N)), dloss, N, W, v0, vocab,
                                      stream_);
  }

  void adam_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamCoefficients& k) override {
    cuda::adam_update(param.data, grad.data, m.data, v.data, param.numel(), k, stream_);
  }
  double sum_squares(Tensor x) override { return reduce(x, true); }
  double sum(Tensor x) override { return reduce(x, false); }

 private:
  static int rows(const Tensor& t) { return static_cast<int>(t.rows()); }
  static int cols(const Tensor& t) { return static_cast<int>(t.cols()); }

  void rope(Tensor qkv, int NH, int KVH, int pos0, float theta, bool inverse) {
    const int B = static_cast<int>(qkv.dim(0)), T = static_cast<int>(qkv.dim(1));
    const int HS = static_cast<int>(qkv.dim(2) / (NH + 2 * KVH));
    cuda::rope(qkv.data, B, T, NH, KVH, HS, pos0, theta, inverse, stream_);
  }

  // x's bf16 copy in `s` (grown, never shrunk: no allocation once the step's
  // shapes have been seen), converted on the stream; a bf16 x is its own.
  // One cuBLAS product, column-major (cuBLAS's view): c (m,n) = op_a(a) op_b(b) + beta c, in the products'
  // operand type (products_, fixed at construction; the one place a product reads it): fp32 operands through
  // cublasSgemm (TF32 under train.tf32), bf16 operands through cublasGemmEx with fp32 sums. a and b come
  // from operand() (or are raw buffers of that type).
  void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* a, int lda, const void* b,
            int ldb, float beta, float* c, int ldc) {
    const float one = 1.0f;
    if (products_ == Dtype::bf16) {
      GPT2_CUBLAS_CHECK(cublasGemmEx(blas_, ta, tb, m, n, k, &one, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &beta, c,
                                     CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
      GPT2_CUBLAS_CHECK(cublasSgemm(blas_, ta, tb, m, n, k, &one, static_cast<const float*>(a), lda,
                                    static_cast<const float*>(b), ldb, &beta, c, ldc));
    }
  }
  // A product's operand as gemm reads it: the tensor's floats, or with bf16
  // products its bf16 copy in `copy` (a bf16 tensor is its own copy).
  const void* operand(const Tensor& x, Scratch& copy) {
    if (products_ == Dtype::bf16) return as_bf16(copy, x);
    expect_f32(x, "cuda matmul: a bf16 operand needs the bf16 products (train.precision bf16)");
    return x.data;
  }

  const void* as_bf16(Scratch& s, const Tensor& x) {
    if (x.is_bf16()) return x.data;
    uint16_t* d = s.get<uint16_t>(static_cast<size_t>(x.numel()));
    cuda::to_bf16(d, x.data, x.numel(), stream_);
    return d;
  }

  // Host integers to the device, ordered on the stream. A copy from pageable
  // memory returns once the source has been read, so the caller may reuse it.
  const int32_t* stage(Scratch& s, const int32_t* host, size_t n) {
    int32_t* d = s.get<int32_t>(n);
    GPT2_CUDA_CHECK(cudaMemcpyAsync(d, host, n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    return d;
  }

  double reduce(const Tensor& x, bool square) {
    double* scratch = reduce_scratch_->get<double>(cuda::reduce_scratch_doubles() + 1);
    cuda::reduce_sum(scratch, scratch + 1, x.data, x.numel(), square, stream_);
    double result = 0;
    memory_->download(&result, scratch, sizeof result);
    return result;
  }

  bool tf32_;
  Dtype products_;  // the products' operand type: bf16 with CudaOptions::bf16
  int device_ = 0;
  cudaDeviceProp prop_{};
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::unique_ptr<CudaMemory> memory_;
  std::optional<Scratch> norm_scratch_, bias_scratch_, att_scratch_, reduce_scratch_, tokens_, targets_, buckets_;
  std::optional<Scratch> bf16_a_, bf16_b_, bf16_c_;  // the products' bf16 operands (operand())
  cuda::TokenBuckets groups_;    // host side of encoder_backward's grouping
  std::vector<int32_t> packed_;  // its arrays, end to end
};

CudaBackend& as_cuda(Backend& be) {
  auto* c = dynamic_cast<CudaBackend*>(&be);
  if (c == nullptr) throw std::invalid_argument(fmt::format("backend '{}' is not a CUDA backend", be.name()));
  return *c;
}

}  // namespace

int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    if (why) *why = fmt::format("cudaGetDeviceCount: {}", cudaGetErrorString(rc));
    return 0;
  }
  if (n == 0 && why) *why = "cudaGetDeviceCount found no devices";
  return n;
}

std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options) {
  std::string why;
  const int n = cuda_device_count(&why);
  if (n <= 0) throw BackendUnavailable(fmt::format("no CUDA device ({})", why));
  return std::make_unique<CudaBackend>(options, n);
}

std::string cuda_unsupported(const std::string& op, int64_t C, int64_t NH) {
  if (op.rfind("attention_", 0) != 0) return "";
  if (op.rfind("attention_block_", 0) == 0 || op.rfind("attention_kv_", 0) == 0) {
    return "the ring attention (context parallelism) runs on the CPU stages only";
  }
  try {
    cuda::attention_head_size(op.c_str(), static_cast<int>(C), static_cast<int>(NH));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

void* cuda_stream_of(Backend& be) { return as_cuda(be).stream(); }

double cuda_ceiling_gflops(Backend& be, int ranks, int ranks_per_machine) {
  return as_cuda(be).ceiling_gflops(ranks, ranks_per_machine);
}

BackendKind cuda_backend_kind() {
  return BackendKind{"cuda",
                     [](const BackendOptions& o) {
                       return make_cuda_backend({.device_hint = o.device_hint, .tf32 = o.tf32, .bf16 = o.bf16});
                     },
                     [](Backend& be, int ranks, int ranks_per_machine, int /*threads*/) {
                       return cuda_ceiling_gflops(be, ranks, ranks_per_machine);
                     }};
}
int cuda_device_of(Backend& be) { return as_cuda(be).device(); }

}  // namespace gpt2
