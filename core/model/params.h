// Parameter layout: the named tensors of GPT-2 and where each sits in the one
// flat buffer that holds them. The same layout serves parameters, gradients
// and both Adam moments, so "tensor k" means the same slice in all four.
//
// Order in the buffer: wte, wpe, layer 0 .. layer L-1, lnf, lm_head. Backward
// produces gradients from the end of the buffer towards its start, so the
// finished part is always one contiguous suffix (what bucketed allreduce needs).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kernels/buffer.h"
#include "model/config.h"
#include "kernels/tensor.h"

namespace gpt2 {

enum class ParamInit { kNormal, kZero, kOne };  // N(0, 0.02) weights, zero biases, unit gains

struct LayerParams {
  Tensor ln1_w, ln1_b;          // (C) (C)
  Tensor qkv_w;                 // (3C, C) rows: q heads, k heads, v heads; no bias
  Tensor attn_proj_w;           // (C, C)
  Tensor attn_proj_b;           // (C)
  Tensor ln2_w, ln2_b;          // (C) (C)
  Tensor fc_w, fc_b;            // (4C, C) (4C)
  Tensor fc_proj_w, fc_proj_b;  // (C, 4C) (C)
};

struct ParamTensors {
  Tensor wte;  // (V, C) token embedding
  Tensor wpe;  // (T, C) learned position embedding
  std::vector<LayerParams> layers;  // L
  Tensor lnf_w, lnf_b;  // (C) (C)
  Tensor lm_head;       // (V, C) not tied to wte
};

struct ParamInfo {
  std::string name;  // e.g. "h.3.fc_w"; the PyTorch reference uses the same names
  Tensor* view;      // the slot in a ParamTensors this entry binds
  std::vector<int64_t> shape;
  ParamInit init;
  bool decay;        // AdamW decays matrices (ndim >= 2) only
  size_t offset;     // in floats, from the start of the flat buffer
};

// Visits every parameter slot of `p` in buffer order; the single definition of
// names, shapes and initialisation. Offsets are filled in by `layout`.
std::vector<ParamInfo> layout(const Gpt2Config& cfg, ParamTensors& p);

// Total number of floats of the parameter buffer.
size_t param_count(const Gpt2Config& cfg);

// Binds every view of a ParamTensors to consecutive slices of `base`.
ParamTensors bind_params(const Gpt2Config& cfg, float* base);

// Parameters, their gradients: two flat buffers with identical layout, in the
// memory of the backend that computes with them (the host by default).
class Gpt2 {
 public:
  explicit Gpt2(const Gpt2Config& cfg, Memory& memory = host_memory());
  Gpt2(const Gpt2&) = delete;
  Gpt2& operator=(const Gpt2&) = delete;

  const Gpt2Config& config() const { return cfg_; }
  // Weights N(0, 0.02) from Philox keyed by (seed, parameter index, element),
  // biases 0, LayerNorm gains 1: bit-identical on every rank and device.
  void init_weights(uint64_t seed);
  void zero_grad() { grads_buf_.zero(); }
  // The whole parameter buffer to / from the host (checkpoints, checksums).
  std::vector<float> params_to_host() const { return params_buf_.download(); }
  void params_from_host(std::span<const float> host) { params_buf_.upload(host); }
  Memory& memory() const { return params_buf_.memory(); }

  const std::vector<ParamInfo>& infos() const { return infos_; }
  size_t num_params() const { return params_buf_.size(); }
  float* param_data() const { return params_buf_.data(); }
  float* grad_data() const { return grads_buf_.data(); }

  ParamTensors params;
  ParamTensors grads;

 private:
  Gpt2Config cfg_;
  Buffer params_buf_;
  Buffer grads_buf_;
  std::vector<ParamInfo> infos_;  // views point into `params`
};

}  // namespace gpt2
