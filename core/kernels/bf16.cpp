#include "kernels/bf16.h"

#include <stdexcept>

namespace gpt2 {

void to_bf16(std::span<const float> in, std::span<bf16> out, int threads) {
  if (in.size() != out.size()) throw std::invalid_argument("to_bf16: input and output sizes differ");
  const int64_t n = static_cast<int64_t>(in.size());
  const float* x = in.data();
  bf16* y = out.data();
#pragma omp parallel for simd num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = to_bf16(x[i]);
}

}  // namespace gpt2
