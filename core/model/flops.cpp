#include "model/flops.h"

namespace gpt2 {

FlopCount training_flops(const Gpt2Config& cfg, int B, int T) {
  const double N = static_cast<double>(B) * T, C = cfg.C, V = cfg.V, L = cfg.L;
  // qkv (NH + 2 KVH heads), projection, fc (H, or 2H for SwiGLU), fc projection.
  const double widths = static_cast<double>(cfg.qkv_width()) + C + cfg.fc_width() + cfg.mlp_width();
  const double gemm = 2.0 * N * C * widths;
  const double attention = 2.0 * 2.0 * B * C * (static_cast<double>(T) * (T + 1) / 2.0);
  const double head = 2.0 * N * C * V;
  FlopCount f;
  f.forward = L * (gemm + attention) + head;
  f.backward = 2.0 * f.forward;
  return f;
}

}  // namespace gpt2
