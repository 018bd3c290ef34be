// Helpers shared by the CUDA kernel files (kernels.cu, attention.cu): launch
// checking and the warp reductions in the butterfly order of device_math.h.
// Device-side only; nothing here is part of the launcher contract.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/device_math.h"

namespace gpt2::cuda::detail {

using dm::kWarpSize;
constexpr unsigned kFullMask = 0xffffffffu;

// Throws naming the kernel if its launch failed (bad configuration, too much
// shared memory, no device). Asynchronous faults surface at the next sync.
inline void check_launch(const char* kernel) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA kernel ") + kernel + " failed to launch: " + cudaGetErrorString(err));
  }
}

// v = op(v, v of lane ^ offset) for offsets 16, 8, 4, 2, 1: every lane ends
// with the same value (dm::warp_butterfly is the host emulation).
template <typename Op>
__device__ inline float warp_reduce(float v, Op op) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}
__device__ inline double warp_reduce_sum(double v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

}  // namespace gpt2::cuda::detail
