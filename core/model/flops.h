// FLOP accounting for one training step, used for FLOP/s and MFU.
//
// Counted: multiply-adds of the matrix products, 2 FLOPs each.
//   per layer, forward:  qkv 2*N*C*3C, attention projection 2*N*C*C,
//                        fc 2*N*C*4C, fc projection 2*N*4C*C   (= 24 N C^2)
//                        causal attention: Q K^T and P V over the T(T+1)/2
//                        visible (query, key) pairs: 2 * 2 * B*NH*HS * T(T+1)/2
//   lm_head, forward:    2*N*C*V (the same product when tied to wte)
// The architecture variant (model/config.h) sets the widths: qkv
// 2*N*C*(NH + 2 KVH)*HS (grouped-query attention has fewer key/value
// heads), fc 2*N*C*H or 2*N*C*2H for SwiGLU's gate and up, fc projection
// 2*N*H*C; the GPT-2 default (KVH = NH, H = 4C) gives 24 N C^2 per layer.
// RoPE, RMSNorm and the activations are element-wise, not counted.
//   backward = 2 x forward (each product has two gradient products; the
//   attention backward's recomputation of Q K^T is not counted).
// Not counted: element-wise work (layernorm, GELU, softmax, residual, Adam),
// a few percent of the total at the original configuration.
#pragma once

#include "model/config.h"

namespace gpt2 {

struct FlopCount {
  double forward = 0;
  double backward = 0;
  double total() const { return forward + backward; }
};

FlopCount training_flops(const Gpt2Config& cfg, int B, int T);

}  // namespace gpt2
