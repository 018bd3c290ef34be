// Parameter layout: the named tensors of GPT-2 and where each sits in the one
// flat buffer that holds them. The same layout serves parameters, gradients
// and both Adam moments, so "tensor k" means the same slice in all four.
//
// Order in the buffer: wte, wpe, layer 0 .. layer L-1, lnf, lm_head; the
// architecture variant (model/config.h) leaves some out (wpe with RoPE, the
// norm biases with RMSNorm, lm_head when tied) and sets widths. Backward
// produces gradients from the end of the buffer towards its start, so the
// finished part is always one contiguous suffix (what bucketed allreduce needs).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kernels/buffer.h"
#include "model/config.h"
#include "kernels/tensor.h"
#include "model/tensor_parallel.h"

namespace gpt2 {

enum class ParamInit { kNormal, kZero, kOne };  // N(0, 0.02) weights, zero biases, unit gains

// How a tensor is split over tensor-parallel ranks (model/tensor_parallel.h):
// not at all (replicated), by rows (column-parallel: an output slice), or by
// columns (row-parallel: an input slice). qkv_w is split by rows within each
// of its three row groups (q, k, v), so a rank holds whole heads of each.
// kVocabRows: wte and lm_head under vocabulary parallelism (TpShape), rows
// [r Vr, (r + 1) Vr) of the full tensor's, the last rank's past V padding.
enum class TpSplit { kNone, kRows, kCols, kVocabRows };

struct LayerParams {
  Tensor ln1_w, ln1_b;          // (C) (C)
  Tensor qkv_w;                 // ((NH + 2 KVH) HS, C) rows: q heads, k heads, v heads
  Tensor qkv_b;                 // ((NH + 2 KVH) HS) with model.bias all, else empty
  Tensor attn_proj_w;           // (C, C)
  Tensor attn_proj_b;           // (C); empty with model.bias none (so are fc_b and fc_proj_b)
  Tensor ln2_w, ln2_b;          // (C) (C)
  Tensor fc_w, fc_b;            // (H, C) (H); SwiGLU (2H, C) (2H): gate rows, then up rows
  Tensor fc_proj_w, fc_proj_b;  // (C, H) (C); H = cfg.mlp_width(), 4C by default
};

// The layers of one pipeline stage (DESIGN.md "Parallel layouts"):
// contiguous layers [first, last), the embeddings on the first stage, the
// final LayerNorm and the head (with the loss) on the last. The default is
// the whole model. Stage s of p holds L / p layers, and the first L % p
// stages one more each (the last stage already carries the head and loss).
// With virtual stages (parallel.virtual_stages) a rank holds several chunks:
// [first, last) is the lowest, `more` the others in layer order; the
// embedding belongs to the chunk starting at layer 0, the head to the one
// ending at the last layer.
struct LayerSpan {
  int first = 0, last = 0;  // layers [first, last)
  bool operator==(const LayerSpan&) const = default;
};
struct StageLayers {
  int first = 0, last = -1;  // last -1: through the last layer
  bool embed = true, head = true;
  std::vector<LayerSpan> more;  // further chunks, above [first, last), ascending; empty: one chunk

  // The rank's layers of virtual stages `stages` (ascending indices) of a
  // split given as layers per virtual stage: one chunk per stage (adjacent
  // ones too: each runs as its own virtual stage). Throws std::invalid_argument as at() does.
  static StageLayers of_stages(const std::vector<int>& counts, const std::vector<int>& stages);
  int chunks() const { return 1 + static_cast<int>(more.size()); }
  // Chunk `i` alone (0 <= i < chunks()), resolved (last >= 0): the
  // embedding with the one starting at layer 0, the head with the one ending at n_layer.
  StageLayers chunk(int i, int n_layer) const;
  // Whether layer `l` is in one of the chunks.
  bool holds(int l, int n_layer) const;

  // Stage `stage` of `stages` over `n_layer` layers; throws
  // std::invalid_argument naming parallel.pp when there are more stages than layers.
  static StageLayers of(int n_layer, int stages, int stage);
  // Stage `stage` of a split given as layers per stage (parallel.stage_layers
  // resolved: train/schedule/stage_split.h), each at least one.
  static StageLayers at(const std::vector<int>& counts, int stage);
  // The default split's counts: of()'s, stage by stage.
  static std::vector<int> even_counts(int n_layer, int stages);
  int end(int n_layer) const { return last < 0 ? n_layer : last; }
  bool whole(int n_layer) const { return first == 0 && end(n_layer) == n_layer && embed && head && more.empty(); }
  bool operator==(const StageLayers&) const = default;
};

struct ParamTensors {
  Tensor wte;  // (V, C) token embedding
  Tensor wpe;  // (T, C) learned position embedding; empty with RoPE
  std::vector<LayerParams> layers;  // L
  Tensor lnf_w, lnf_b;  // (C) (C)
  Tensor lm_head;       // (V, C); empty when tied (the head uses wte)
};

struct ParamInfo {
  std::string name;  // e.g. "h.3.fc_w"; the PyTorch reference uses the same names
  Tensor* view;      // the slot in a ParamTensors this entry binds
  std::vector<int64_t> shape;
  ParamInit init;
  bool decay;        // AdamW decays matrices (ndim >= 2) only
  size_t offset;     // in floats, from the start of the flat buffer
  TpSplit split = TpSplit::kNone;
  // kRows: the shard's rows per group; each group of the full tensor is split
  // on its own (qkv_w: q, k, v heads; SwiGLU's fc: gate, up). Empty: one group.
  std::vector<int64_t> groups;
  int64_t full_rows = 0;  // kVocabRows: the full tensor's rows (V)
  // Its floats, from the shape (a layout's views may not be bound yet).
  size_t count() const {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return n;
  }
};

// Visits every parameter slot of `p` in buffer order; the single definition of
// names, shapes, splits and initialisation. Offsets are filled in by
// `layout`. With tp > 1 the shapes are one tensor-parallel rank's shard;
// with a pipeline stage only its tensors are listed (names stay global:
// "h.3.fc_w" on whichever stage holds layer 3).
std::vector<ParamInfo> layout(const Gpt2Config& cfg, ParamTensors& p, TpShape tp = {}, StageLayers stage = {});

// Total number of floats of the parameter buffer (of one shard with tp > 1,
// of one stage's tensors).
size_t param_count(const Gpt2Config& cfg, TpShape tp = {}, StageLayers stage = {});

// Weights read from a file are checked finite before they are used (an
// imported or loaded model of NaNs would generate garbage with exit 0):
// "" when every value is finite, else "element 17 is nan" (the first).
std::string non_finite(std::span<const float> x);
// The same over `cfg`'s whole parameter buffer, naming the tensor:
// "tensor h.3.qkv_w: element 17 is nan"; "" when every value is finite.
std::string non_finite_tensor(const Gpt2Config& cfg, std::span<const float> params);

// The units a layer-wise sharding moves (ZeRO-2 and ZeRO-3, DESIGN.md
// "Memory"): the embeddings (wte, wpe), each layer, the head (final norm
// and lm_head), each one contiguous run [offset, offset + count) of the flat
// buffer, in buffer order. `id` is 0 for the embeddings, 1 + l for layer l and
// L + 1 for the head, on every stage; a stage lists only the units it holds.
struct ParamUnit {
  int id = 0;
  size_t offset = 0, count = 0;
};
std::vector<ParamUnit> param_units(const Gpt2Config& cfg, const std::vector<ParamInfo>& infos);
// The unit id of a parameter name ("wte" 0, "h.3.fc_w" 4, "lnf_w" L + 1).
int unit_id(const std::string& name, int n_layer);

// What the model's own buffers hold. kWhole: the parameters and gradients
// (every layout but ZeRO-2/3). kParams: the parameters; each unit's gradient
// views are bound by a UnitHook to working memory while the backward computes
// it (ZeRO-2). kNone: neither; a unit's parameter views are bound only while
// a pass uses them (ZeRO-3). Outside those windows the views are empty.
enum class Residency { kWhole, kParams, kNone };

// Tensor-parallel rank `rank` of `tp`'s shard of a pipeline stage's tensors,
// cut from a full buffer in layout order (parameters, gradients or Adam
// moments alike), and its inverse: the part written back into its places of
// the full buffer. tp = 1 and the whole model copy.
std::vector<float> shard_of(const Gpt2Config& cfg, TpShape tp, int rank, std::span<const float> full,
                            StageLayers stage = {});
void place_shard(const Gpt2Config& cfg, TpShape tp, int rank, std::span<const float> shard, std::span<float> full,
                 StageLayers stage = {});

// One contiguous piece of tensor-parallel rank `rank` of `tp`'s part of a
// pipeline stage (shard_of's buffer): `count` floats at `local` in that
// part, which are floats [full, full + count) of the whole model's buffer.
// `replicated`: the tensor is whole on every rank of the group (TpSplit::kNone).
struct ShardPiece {
  size_t full = 0, local = 0, count = 0;
  bool replicated = false;
};
// Every piece of that part, in its order (vocabulary padding, which no
// full float maps to, left out): the map sharded checkpoints are written
// and resharded by (train/formats/sharded_checkpoint.h).
std::vector<ShardPiece> shard_pieces(const Gpt2Config& cfg, TpShape tp, int rank, StageLayers stage = {});

// The initial weights of the full model: N(0, 0.02) from Philox keyed by
// (seed, parameter index, element index), biases 0, LayerNorm gains 1.
std::vector<float> initial_weights(const Gpt2Config& cfg, uint64_t seed);

// Floats [begin, begin + out.size()) of tensor-parallel rank `rank`'s part
// of initial_weights (its shard of `stage`'s tensors, in its own layout;
// vocabulary padding 0), each computed where it lands: no array of the whole
// model is made, so a rank can start a model larger than its memory
// (ZeRO-3). The same values as shard_of(initial_weights(...)). Philox only:
// model.init original's draws are one sequence over the whole model, and
// throw std::invalid_argument.
void initial_values(const Gpt2Config& cfg, uint64_t seed, TpShape tp, int rank, StageLayers stage, size_t begin,
                    std::span<float> out);

// Parameters, their gradients: two flat buffers with identical layout, in the
// memory of the backend that computes with them (the host by default). With a
// tensor-parallel layout (tp.size > 1) both hold this rank's shard; with a
// pipeline stage, that stage's tensors only. `pad_to` rounds both buffers up
// to a multiple of that many floats (zeros past num_params()), so that ZeRO's
// reduce-scatter and all-gather cut them into equal shards.
class Gpt2 {
 public:
  explicit Gpt2(const Gpt2Config& cfg, Memory& memory = host_memory(), TpPlace tp = {}, StageLayers stage = {},
                size_t pad_to = 1, Residency residency = Residency::kWhole);
  Gpt2(const Gpt2&) = delete;
  Gpt2& operator=(const Gpt2&) = delete;

  const Gpt2Config& config() const { return cfg_; }
  const TpPlace& tp() const { return tp_; }
  // This rank's pipeline stage, resolved (last >= 0).
  const StageLayers& stage() const { return stage_; }
  // This rank's shard of initial_weights(seed): bit-identical on every rank
  // and device, and the same global weights for every layout.
  void init_weights(uint64_t seed);
  void zero_grad() { grads_buf_.zero(); }
  // The whole parameter buffer to / from the host (checkpoints, checksums);
  // a model without its parameters (Residency::kNone) throws std::logic_error.
  std::vector<float> params_to_host() const;
  void params_from_host(std::span<const float> host);
  Memory& memory() const { return *memory_; }
  Residency residency() const { return residency_; }

  // This model's units (a stage's own), and their views rebound: unit `u`'s
  // parameter views to consecutive slices of `params`, its gradient views to
  // those of `grads` (nullptr: that side unbound). Only for kParams (grads)
  // and kNone (both); a resident side stays bound to the model's buffer.
  const std::vector<ParamUnit>& units() const { return units_; }
  void bind_unit(const ParamUnit& u, float* params, float* grads);
  // Residency::kWhole: every gradient view rebound to `grads` + its offset (a
  // flat array of num_params() floats in this memory: train.deterministic's
  // tree buffers, so a backward writes its leaf there); nullptr: back to the
  // model's own buffer. grad_data() names the model's buffer either way.
  void bind_grads(float* grads);

  const std::vector<ParamInfo>& infos() const { return infos_; }
  size_t num_params() const { return n_; }
  size_t padded_params() const { return padded_; }  // num_params() rounded up to pad_to
  float* param_data() const { return params_buf_.data(); }
  float* grad_data() const { return grads_buf_.data(); }
  // Where the gradient views point now: bind_grads' buffer, or grad_data().
  float* bound_grads() const { return bound_grads_ != nullptr ? bound_grads_ : grads_buf_.data(); }

  ParamTensors params;
  ParamTensors grads;

 private:
  Gpt2Config cfg_;
  TpPlace tp_;
  StageLayers stage_;
  size_t n_ = 0, padded_ = 0;
  Memory* memory_;
  Residency residency_;
  Buffer params_buf_;  // empty with Residency::kNone
  Buffer grads_buf_;   // empty unless Residency::kWhole
  float* bound_grads_ = nullptr;  // bind_grads' buffer (nullptr: the model's own)
  std::vector<ParamInfo> infos_;       // views point into `params`
  std::vector<ParamInfo> grad_infos_;  // the same list, views into `grads`
  std::vector<ParamUnit> units_;
};

}  // namespace gpt2
