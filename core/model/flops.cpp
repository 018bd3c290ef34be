#include "model/flops.h"

namespace gpt2 {

FlopCount training_flops(const Gpt2Config& cfg, int B, int T) {
  const double N = static_cast<double>(B) * T, C = cfg.C, V = cfg.V, L = cfg.L;
  const double gemm = 24.0 * N * C * C;
  const double attention = 2.0 * 2.0 * B * C * (static_cast<double>(T) * (T + 1) / 2.0);
  const double head = 2.0 * N * C * V;
  FlopCount f;
  f.forward = L * (gemm + attention) + head;
  f.backward = 2.0 * f.forward;
  return f;
}

}  // namespace gpt2
