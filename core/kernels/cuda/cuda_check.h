// Error checks for CUDA runtime, cuBLAS and NCCL calls: a failure throws
// std::runtime_error naming the call, the file, the line and the library's
// own message.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <stdexcept>

namespace gpt2 {
[[noreturn]] inline void throw_call_failed(const char* file, int line, const char* call, const char* message,
                                           int code) {
  throw std::runtime_error(fmt::format("{}:{}: {} failed: {} ({})", file, line, call, message, code));
}
}  // namespace gpt2

// `ok` is the library's success value, `describe` turns a status into text.
#define GPT2_CHECK_CALL(call, ok, describe)                                                     \
  do {                                                                                          \
    const auto check_rc_ = (call);                                                              \
    if (check_rc_ != (ok)) {                                                                    \
      ::gpt2::throw_call_failed(__FILE__, __LINE__, #call, describe(check_rc_), static_cast<int>(check_rc_)); \
    }                                                                                           \
  } while (0)

#define GPT2_CUDA_CHECK(call) GPT2_CHECK_CALL(call, cudaSuccess, cudaGetErrorString)
#define GPT2_CUBLAS_CHECK(call) GPT2_CHECK_CALL(call, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
