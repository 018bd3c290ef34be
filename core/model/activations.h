// Activations: every intermediate tensor of one forward pass (kept for the
// backward pass) and the backward pass's scratch gradients, carved from ONE
// Buffer sized once from (B, T, config). A training step allocates nothing.
#pragma once

#include <vector>

#include "kernels/buffer.h"
#include "model/config.h"
#include "kernels/tensor.h"

namespace gpt2 {

struct LayerActivations {
  Tensor ln1, ln1_mean, ln1_rstd;  // (B,T,C) (B,T) (B,T)
  Tensor qkv;                      // (B,T,3C)
  Tensor atty;                     // (B,T,C) attention output, before the projection
  Tensor att_lse;                  // (B,NH,T) log-sum-exp per softmax row
  Tensor residual2;                // (B,T,C) residual + attention projection
  Tensor ln2, ln2_mean, ln2_rstd;  // (B,T,C) (B,T) (B,T)
  Tensor fch;                      // (B,T,4C) fc output, GELU input
  Tensor fch_gelu;                 // (B,T,4C)
  Tensor residual3;                // (B,T,C) residual2 + MLP projection: the block's output
};

struct Activations {
  int B = 0, T = 0;
  Tensor encoded;  // (B,T,C) token + position embedding
  std::vector<LayerActivations> layers;  // L
  Tensor lnf, lnf_mean, lnf_rstd;  // (B,T,C) (B,T) (B,T)
  Tensor logits;   // (B,T,V); the backward pass overwrites it with dlogits
  Tensor losses;   // (B,T) per-position cross-entropy
  Tensor proj;     // (B,T,C) projection output before its residual add (not kept)
  // Backward scratch, shared by all layers.
  Tensor dresidual;  // (B,T,C) gradient of the residual stream, accumulated in place
  Tensor dln;        // (B,T,C) gradient at a LayerNorm output
  Tensor datty;      // (B,T,C)
  Tensor dqkv;       // (B,T,3C)
  Tensor dfch;       // (B,T,4C) gradient at the GELU output, then (in place) its input
};

class ActivationArena {
 public:
  ActivationArena(const Gpt2Config& cfg, int B, int T, Memory& memory = host_memory());
  ActivationArena(const ActivationArena&) = delete;
  ActivationArena& operator=(const ActivationArena&) = delete;
  Activations& acts() { return acts_; }
  size_t bytes() const { return buf_.bytes(); }
  // Re-carves the same buffer for another (B, T) with B * T no larger than
  // at construction (generation grows its window one token at a time).
  void reshape(int B, int T);

 private:
  void carve(int B, int T);
  Gpt2Config cfg_;
  Buffer buf_;
  Activations acts_;
};

}  // namespace gpt2
