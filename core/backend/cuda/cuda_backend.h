// The CUDA backend: the kernel contract of backend.h on one NVIDIA GPU.
// GEMMs through cuBLAS in FP32 (TF32 tensor cores only when asked for);
// every other kernel is our own (kernels.cu, math in device_math.h). All
// tensors live in plain device memory (cudaMalloc, never managed memory);
// all work goes onto ONE stream with no synchronisation between kernels: the
// host waits only where it needs a value (the loss, the gradient norm,
// downloads). Built only when Meson finds nvcc and the CUDA libraries.
#pragma once

#include <memory>
#include <string>

#include "backend.h"

namespace gpt2 {

struct CudaOptions {
  int device_hint = 0;  // the GPU is device_hint % device count (a rank's local rank)
  bool tf32 = false;    // let cuBLAS use TF32 tensor cores (changes results)
};

// The number of usable CUDA devices; 0 when there is none or no driver, with
// the reason in *why (never throws: a machine without a GPU is normal).
int cuda_device_count(std::string* why = nullptr);

// Throws BackendUnavailable ("no CUDA device: ...") where there is none.
std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options = {});

// The stream a CUDA backend enqueues on (a cudaStream_t) and its device:
// what NCCL needs to run the gradient allreduce in the same order.
// Throws std::invalid_argument for a backend that is not a CUDA one.
void* cuda_stream_of(Backend& be);
int cuda_device_of(Backend& be);

}  // namespace gpt2
