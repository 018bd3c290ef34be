// Activations: every intermediate tensor of one forward pass (kept for the
// backward pass) and the backward pass's scratch gradients, carved from ONE
// Buffer sized once from (B, T, config). A training step allocates nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/buffer.h"
#include "model/config.h"
#include "model/context_parallel.h"
#include "kernels/tensor.h"
#include "model/params.h"
#include "model/tensor_parallel.h"

namespace gpt2 {

// With P tensor-parallel ranks (model/tensor_parallel.h) the sharded
// widths are this rank's: 3C/P, C/P, NH/P and 4C/P where marked "/P".
// Widths are the GPT-2 default's; a variant (model/config.h) sets them:
// qkv (NH + 2 KVH) HS instead of 3C, the MLP's hidden H instead of 4C, fch
// 2H with SwiGLU; RMSNorm keeps no means (empty). With post-norm
// (norm_position post) the block is x -> r2 = x + attn(x) -> h = norm1(r2)
// -> r3 = h + mlp(h) -> norm2(r3), and the tensors hold: ln1 = h,
// residual2 = r2, ln2 = r3 (norm2's input), residual3 = norm2's output
// (model.cpp reads them through PostNormRoles, by those names).
struct LayerActivations {
  Tensor ln1, ln1_mean, ln1_rstd;  // (B,T,C) (B,T) (B,T)
  Tensor qkv;                      // (B,T,3C/P), RoPE already applied to q and k
  Tensor atty;                     // (B,T,C/P) attention output, before the projection
  Tensor att_lse;                  // (B,NH/P,T) log-sum-exp per softmax row
  Tensor residual2;                // (B,T,C) residual + attention projection (private layers: u, this rank's)
  Tensor ln2, ln2_mean, ln2_rstd;  // (B,T,C) (B,T) (B,T)
  Tensor fch;                      // (B,T,4C/P) fc output, the activation's (or SwiGLU's) input
  Tensor fch_gelu;                 // (B,T,4C/P) the MLP's hidden activations (H wide)
  Tensor residual3;                // (B,T,C) residual2 + MLP projection: the block's output (private
                                   // layers inside a run: this rank's stream)
  // A backward split into B (input gradients) and W (weight gradients), as
  // the zero-bubble pipeline runs it, else empty: the gradients at the four
  // matrix products' outputs, kept by B for W. Each is a view of a forward
  // tensor that B no longer needs when it writes it (nor W after), so the
  // split arena is no larger than the whole backward's.
  Tensor d_res3;                   // (B,T,C) at the MLP projection's output; = residual3
  Tensor d_fch;                    // (B,T,4C/P) at the fc output; = fch (SwiGLU: its own)
  Tensor d_res2;                   // (B,T,C) at the attention projection's output; = residual2
  Tensor d_qkv;                    // (B,T,3C/P) at the qkv output; = qkv
};

// How an arena's attention runs, and with it the sums train.sequence_pieces
// defines (the loss's, the token table's gradient): decided once, when the
// arena is made or reshaped (issue 69), read by the model at every call.
//   kPlain   whole rows (attention_forward);
//   kRing    context parallelism's ring over the cp group (ring_attention_*);
//   kPieces  train.sequence_pieces' tiles and pair trees (PieceOps; the
//            arena holds the pieces' rows: ArenaSpec::pieces at its seq_len).
enum class AttentionKind { kPlain, kRing, kPieces };

struct Activations {
  int B = 0, T = 0;
  AttentionKind attention = AttentionKind::kPlain;
  // The arena's pipeline stage (one chunk under virtual stages): layers
  // [first, last), with the embedding and the head or not. The forward and
  // the backward run these.
  int first = 0, last = 0;
  bool embed = true, head = true;
  int pos0 = 0;    // RoPE: the position of row 0 (set by the forward pass; the backward reads it)
  Tensor encoded;  // (B,T,C) token + position embedding; on a later pipeline stage, the stage's input
  std::vector<LayerActivations> layers;  // L, of which only the stage's layers are carved
  bool split_backward = false;           // the layers' d_* tensors are carved
  // Recomputation (train.recompute full): every layer but the stage's first
  // shares the first's tensors, residual3 (its output) aside; the backward
  // runs a layer's forward again before its backward (model/model.h).
  bool recompute = false;
  Tensor lnf, lnf_mean, lnf_rstd;  // (B,T,C) (B,T) (B,T); the last pipeline stage only
  Tensor logits;   // (B,T,V) (/P: Vr columns with vocabulary sharding); the backward pass overwrites it with
                   // dlogits; the last stage only
  Tensor losses;   // (B,T) per-position cross-entropy; the last stage only
  // Vocabulary sharding (TpShape::vocab), else empty: the loss's statistics
  // of every rank's shard, (P + 1, B*T), summed over the group (rows 0..P-1
  // each rank's log-sum-exp, row P the target's logit), and the row's
  // log-sum-exp over the whole vocabulary (B*T), kept for the backward.
  Tensor ce_parts, ce_lse;
  Tensor proj;     // (B,T,C) projection output before its residual add (not kept)
  // Backward scratch, shared by all layers.
  Tensor dresidual;  // (B,T,C) gradient of the residual stream, accumulated in place
  Tensor dln;        // (B,T,C) gradient at a LayerNorm output
  Tensor datty;      // (B,T,C/P)
  Tensor dqkv;       // (B,T,3C/P)
  Tensor dfch;       // (B,T,4C/P) gradient at the activation's output, then (in place) its input
  Tensor dhid;       // (B,T,H/P) SwiGLU only: gradient at its output (dfch then takes its input's)
  Tensor no_pos;     // (block_size,C) zeros: a RoPE model's embedding has no position table, nor a vocabulary
                     // shard's but the first (rank 0 adds the positions); else empty
  Tensor dpos;       // (T,C) RoPE: where the embedding backward's (unused) position gradient goes
  // Private runs of tensor-parallel layers (spd, parallel), else empty:
  Tensor run_sum;    // (B,T,C) this rank's partial outputs of the run, summed over the group at its end
  Tensor drun;       // (B*T*C + 6*C*L) this rank's stream gradient (B,T,C), then the run's LayerNorm
                     // and bias gradients (6 x C per layer), summed over the group in one call
  std::vector<int32_t> zero_rows;  // B*T zeros, host: bias rows through the embedding kernels
  // Vocabulary sharding: the forward's token ids as rows of this rank's
  // shard of wte, -1 for another rank's (B*T, host; the backward reads them).
  std::vector<int32_t> vocab_ids;
  // Megatron's sequence parallelism (TpShape::sequence, parallel.sequence_parallel), else false and empty:
  // the residual stream's tensors (encoded, residual2, residual3, dresidual), the layers' norms' outputs
  // (ln1, ln2) and the norms' statistics hold this rank's rows of the B*T, rows [r N/P, (r+1) N/P), as
  // (1, N/P, C); a product's input is gathered whole into `proj` when it runs (forward and backward), lnf
  // is kept whole; the row-parallel products' sums are reduce-scattered.
  bool sequence = false;
  Tensor sp_rows;        // (1, N/P, C) a norm's output, or a sum's, before its gather or after its scatter
  Tensor sp_norm_grads;  // (4C) a layer's norms' weight (and bias) gradients over this rank's rows, summed
  Tensor sp_stats;       // (2 B*T) train.deterministic: a norm's mean and rstd gathered over every row
  // Context parallelism (TpShape::context, parallel.cp), else off and empty: the arena's B rows are the
  // head chunks of B/2 rows of the batch, then their tail chunks (model/context_parallel.h); the ring
  // attention's two buffers of packed keys and values and two of their gradients.
  ContextCut cp;
  Tensor cp_kv;   // (2, B, T, 2 KVH HS / P)
  Tensor cp_dkv;  // (2, B, T, 2 KVH HS / P)
  // train.sequence_pieces (PieceOps): the attention's gathers and pair trees
  // (model/context_parallel.h) and a tied head's own gradient tree (V, C);
  // host buffers grown on first use, outside the arena's count (docs/determinism.md).
  PieceBuffers piece_buffers;
};

// The floats of an arena of (B, T) for `cfg` sharded as `tp` over its
// tensor-parallel ranks (`runs`: the layout has private runs), holding
// `stage`'s layers, with the split backward's tensors when `split`: what
// ActivationArena allocates, and what a run's plan states (train/resolve/plan.h).
// `stored`: the element type of the tensors only a matrix product reads
// (LayerActivations' ln1 and ln2 before a product, atty, fch_gelu, and lnf):
// bf16 with train.precision bf16, which halves their bytes; the rest is f32.
size_t arena_floats(const Gpt2Config& cfg, int B, int T, TpShape tp, bool runs, StageLayers stage, bool split,
                    bool recompute = false, Dtype stored = Dtype::f32);

// The same arena's floats by kind (docs/memory.md, "Activations"): what the
// embedding keeps (its output, a RoPE model's zero table), what every layer
// keeps for the backward (LayerActivations), what the head keeps (final
// norm, logits, losses) and the backward's scratch shared by all layers.
// Each kind counts its tensors' 64-byte padding; the four add up to
// arena_floats.
struct ArenaKinds {
  size_t embed = 0, layers = 0, head = 0, scratch = 0;
  size_t total() const { return embed + layers + head + scratch; }
};
ArenaKinds arena_kinds(const Gpt2Config& cfg, int B, int T, TpShape tp, bool runs, StageLayers stage, bool split,
                       bool recompute = false, Dtype stored = Dtype::f32);

// What one activation arena holds, decided once with the run's layout
// (issue 69; train/resolve/layout.h StepSpec::arena): its rows and
// positions; the stored activations' dtype; recomputation (train.recompute
// full: each layer keeps its input only); the backward split into B and W
// (zb-h1, zb-v: the layers' d_* tensors carved); and the cuts of its rows:
// Megatron's sequence parallelism over the tensor-parallel group
// (TpShape::sequence; rows x seq_len must divide by the group) and context
// parallelism's head and tail chunks (TpShape::context; rows must be even).
struct ArenaSpec {
  ArenaSpec(int rows_, int seq_len_) : rows(rows_), seq_len(seq_len_) {}
  ArenaSpec& with_stored(Dtype d) { stored = d; return *this; }
  ArenaSpec& with_context(const ContextCut& c) { context = c; return *this; }
  ArenaSpec& with_pieces(bool on) {
    pieces = on;
    return *this;
  }

  int rows = 0;
  int seq_len = 0;
  Dtype stored = Dtype::f32;
  bool recompute = false;
  bool split_backward = false;
  bool sequence_parallel = false;
  ContextCut context;
  // train.sequence_pieces: the arena's rows at seq_len are the pieces' rows
  // (AttentionKind::kPieces; reshaped to another length, the plain kernels run).
  bool pieces = false;
};

// The arena of one pipeline stage (the whole model by default) holds that
// stage's layers only, and the head's tensors on the last stage.
class ActivationArena {
 public:
  ActivationArena(const Gpt2Config& cfg, const ArenaSpec& spec, Memory& memory = host_memory(), const TpPlace& tp = {},
                  StageLayers stage = {});
  ActivationArena(const Gpt2Config& cfg, int B, int T, Memory& memory = host_memory())
      : ActivationArena(cfg, ArenaSpec(B, T), memory) {}
  // For `model`: its configuration, its tensor-parallel shard, its stage and its memory.
  // `chunk`: one chunk of the model's (StageLayers::chunk) when it holds
  // several (virtual stages); nullptr: the model's stage, which must be one chunk.
  ActivationArena(const Gpt2& model, const ArenaSpec& spec, const StageLayers* chunk = nullptr);
  ActivationArena(const Gpt2& model, int B, int T) : ActivationArena(model, ArenaSpec(B, T)) {}
  ActivationArena(const ActivationArena&) = delete;
  ActivationArena& operator=(const ActivationArena&) = delete;
  Activations& acts() { return acts_; }
  size_t bytes() const { return buf_.bytes(); }
  // What the arena carved, by kind (floats).
  const ArenaKinds& kinds() const { return kinds_; }
  // Re-carves the same buffer for another (B, T) with B * T no larger than
  // at construction (generation grows its window one token at a time).
  void reshape(int B, int T);

 private:
  void init(int B, int T, Memory& memory);  // the constructors' common part
  void carve(int B, int T);
  Gpt2Config cfg_;
  TpShape tp_;
  bool private_runs_ = false;
  StageLayers stage_;
  bool split_ = false;
  bool recompute_ = false;
  Dtype stored_ = Dtype::f32;
  int pieces_T_ = 0;  // the seq_len whose rows are the sequence pieces' (ArenaSpec::pieces), 0 for none
  void cut_rows(const ArenaSpec& spec);  // the spec's sequence and context cuts into tp_ and acts_
  Buffer buf_;
  ArenaKinds kinds_;
  Activations acts_;
};

}  // namespace gpt2
