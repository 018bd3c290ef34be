// The CUDA backend: the kernel contract of backend.h on one NVIDIA GPU.
// GEMMs through cuBLAS in FP32 (TF32 tensor cores only when asked for);
// every other kernel is our own (kernels.cu, math in device_math.h). All
// tensors live in plain device memory (cudaMalloc, never managed memory);
// all work goes onto ONE stream with no synchronisation between kernels: the
// host waits only where it needs a value (the loss, the gradient norm,
// downloads). Built only when Meson finds nvcc and the CUDA libraries.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/backend.h"

namespace gpt2 {

struct CudaOptions {
  int device_hint = 0;  // the GPU is device_hint % device count (a rank's local rank)
  bool tf32 = false;    // let cuBLAS use TF32 tensor cores (changes results)
  // train.precision bf16: every matrix product rounds its operands to bf16
  // (dm::bf16_bits, the CPU's rounding) and adds in fp32 (cublasGemmEx,
  // CUBLAS_COMPUTE_32F). Activations stay fp32 in device memory
  // (accepts_bf16 is false), and so does the attention.
  bool bf16 = false;
};

// The number of usable CUDA devices; 0 when there is none or no driver, with
// the reason in *why (never throws: a machine without a GPU is normal).
int cuda_device_count(std::string* why = nullptr);

// Throws BackendUnavailable ("no CUDA device: ...") where there is none.
std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options = {});

// Why the CUDA backend cannot run `op` with C channels in NH heads, or ""
// when it can: its attention kernels (attention_forward, _backward, _decode)
// take head sizes that are multiples of 32, at most 128 (kernels.h,
// attention_head_size); every other op takes any shape. The backend-ops test
// and kernel_bench_cuda skip such cases and say why.
std::string cuda_unsupported(const std::string& op, int64_t C, int64_t NH);

// The stream a CUDA backend enqueues on (a cudaStream_t) and its device:
// what NCCL needs to run the gradient allreduce in the same order.
// Throws std::invalid_argument for a backend that is not a CUDA one.
void* cuda_stream_of(Backend& be);
int cuda_device_of(Backend& be);

// The FP32 matrix-product ceiling of `ranks` CUDA backends, ranks_per_machine
// on each machine, in GFLOP/s: the best of five 4096^3 cuBLAS SGEMMs on be's
// GPU, times the GPUs the ranks use (ranks beyond a machine's GPU count share
// them). The MFU denominator of the CUDA stages.
double cuda_ceiling_gflops(Backend& be, int ranks, int ranks_per_machine);

// make_cuda_backend (options.device_hint, options.tf32) and cuda_ceiling_gflops.
BackendKind cuda_backend_kind();

}  // namespace gpt2
