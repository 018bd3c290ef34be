// Tensor parallelism as the model sees it (Megatron-LM, Shoeybi et al. 2019):
// which shard of the weights this rank holds, the block type of each layer,
// and the one verb the blocks need, the sum over the tensor-parallel group.
// The group itself is a Communicator's (CommGroup, parallel/process_grid.h); the model layer
// only names the interface, as it does for GradReadyHook.
//
// Shards: rank r of P holds attention heads [r*NH/P, (r+1)*NH/P): its rows
// of q, k and v (column-parallel qkv_w), the matching columns of attn_proj_w
// (row-parallel), rows r*4C/P .. of fc_w and fc_b (column-parallel) and the
// matching columns of fc_proj_w (row-parallel). Everything else (embeddings,
// LayerNorms, the row-parallel biases, the head) is replicated.
//
// Block types (one per layer):
//   tp        Megatron: f before each column-parallel pair (identity forward,
//             sum of the input gradient backward), g after each row-parallel
//             one (sum forward, identity backward); the standard function.
//             The row-parallel bias is added once: by the group's rank 0,
//             inside its partial product before the sum (the same value as
//             adding it after the sum, without another pass).
//   spd       Sync-Point Drop: no sum after attention. Rank i adds its own
//             partial attention output a_i and the projection bias to its
//             copy of the input, runs LayerNorm 2 and its MLP shard m_i on
//             that; one sum ends the block:
//               out = x + sum_i (a_i + m_i) + b_attn_proj + b_fc_proj.
//   parallel  a run of consecutive parallel layers keeps each rank's residual
//             stream private; one sum at the run's end. Rank i's stream s_i
//             starts at the run's input x; each layer l of the run does
//               u_i = s_i + a_i + b_attn_proj_l,  s_i = u_i + m_i + b_fc_proj_l
//             (a_i, m_i from LayerNorms of s_i and u_i), and
//               out = x + sum_i sum_l (a_i + m_i) + sum_l (b_attn_proj_l + b_fc_proj_l).
//             An spd layer is exactly a parallel run of one layer; with one
//             rank every type is the standard block.
// spd and parallel compute other functions than the standard model (the
// "DistributedGPT" study's block types); tp computes the standard one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

#include "kernels/tensor.h"

namespace gpt2 {

enum class BlockType { kTp, kSpd, kParallel };

// "tp" | "spd" | "parallel"; throws std::invalid_argument naming `key`.
BlockType parse_block_type(const std::string& name, const std::string& key = "parallel.block_types");
std::string to_string(BlockType t);

// The sum over the ranks of one tensor-parallel group.
class TpGroup {
 public:
  virtual ~TpGroup() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // In place: x = sum over the group of x (the backend's memory).
  virtual void allreduce_sum(Tensor x) = 0;
  virtual double allreduce_sum(double x) = 0;
  // train.deterministic (docs/determinism.md): x = the sum over the group in
  // the canonical tree's order, by recursive doubling (partners rank ^ 1,
  // rank ^ 2, ...: each pair adds the same two values, and a + b == b + a),
  // so every rank holds the bits of the balanced tree over the ranks' values
  // (host memory; a power-of-two group).
  virtual void tree_sum(Tensor x) = 0;
  // Megatron's sequence parallelism (parallel.sequence_parallel): `full`
  // (N, ...) is size() blocks of rows in rank order, `shard` this rank's.
  // all_gather: full = every rank's shard (both of one element type: a bf16
  // norm output under train.precision bf16 travels as its bytes);
  // reduce_scatter_sum: shard = the sum over the group of every rank's block
  // of `full` at this rank's place (f32).
  virtual void all_gather(Tensor shard, Tensor full) = 0;
  virtual void reduce_scatter_sum(Tensor full, Tensor shard) = 0;
  // train.deterministic: reduce_scatter_sum in tree_sum's order, by
  // recursive halving (partners rank ^ 1, rank ^ 2, ...: at each level a
  // rank keeps the blocks of the owners that share its bits so far and adds
  // its partner's copy of them), so that every block holds the bits
  // tree_sum gives it; `full` is overwritten (host memory; a power-of-two group).
  virtual void tree_reduce_scatter(Tensor full, Tensor shard) = 0;
};

// How a model's tensors are cut over `size` tensor-parallel ranks: the
// blocks' always; with `vocab` (parallel.vocab_parallel) also the token
// embedding and the head, by vocabulary rows (Megatron's
// VocabParallelEmbedding and parallel cross-entropy): rank r holds rows
// [r Vr, (r + 1) Vr) of wte and lm_head, Vr = ceil(V / size), the last
// rank's rows past V zero padding that no token reads and no gradient
// reaches. An int converts to the shape without vocabulary sharding.
struct TpShape {
  int size = 1;
  bool vocab = false;
  // Megatron's sequence parallelism (set on an activation arena, not on the
  // model): the residual stream's rows cut over the group, model/activations.h.
  bool sequence = false;
  // Context parallelism (set on an activation arena): the arena's rows are its rank's head and tail chunks of
  // every row of the batch over `context` ranks (model/context_parallel.h); 1: whole rows.
  int context = 1;
  TpShape(int p = 1, bool v = false) : size(p), vocab(v && p > 1) {}  // NOLINT: an int is a shape
  // The vocabulary rows of wte and lm_head a rank holds, padding included.
  int64_t vocab_rows(int64_t V) const { return vocab ? (V + size - 1) / size : V; }
};

// One rank's place in tensor parallelism. size 1 (the default) is the
// unsharded model: every layer runs the standard block, whatever its type.
struct TpPlace {
  int size = 1;
  int rank = 0;
  std::vector<BlockType> blocks;  // one per layer; empty: every layer tp
  TpGroup* group = nullptr;       // required when size > 1
  bool vocab = false;             // the embedding, head and loss sharded by vocabulary rows (TpShape)
  // train.deterministic: the canonical pieces of every dimension tensor
  // parallelism cuts (canonical_pieces); 0: off. The row-parallel products
  // and the column-parallel input gradients are then trees over the pieces
  // (TreeProducts::matmul_forward_tree), finished across ranks by tree_sum.
  int pieces = 0;

  TpShape shape() const { return {size, vocab}; }
  // With vocabulary sharding, the first vocabulary row this rank holds (0 without).
  int64_t vocab_begin(int64_t V) const { return shape().vocab ? rank * shape().vocab_rows(V) : 0; }

  // Throws std::invalid_argument naming the parallel.* key that is wrong for
  // a model of `n_layer` layers, `n_head` heads and `n_embd` channels.
  void validate(const Gpt2Config& model) const;
  // Throws std::invalid_argument unless `group` is this layout's (size > 1).
  void check_group() const;
  BlockType type(int layer) const { return blocks.empty() ? BlockType::kTp : blocks[static_cast<size_t>(layer)]; }
  // The layer runs on a private residual stream (spd or parallel, size > 1).
  bool is_private(int layer) const { return size > 1 && type(layer) != BlockType::kTp; }
  // The first layer of the private run holding `layer`, and whether `layer` ends it.
  int run_start(int layer) const;
  bool ends_run(int layer) const;
  // Any private layer (the activation arena then holds the run buffers).
  bool has_private() const;
  // The block types as text: "tp,spd,parallel" (the list as configured).
  std::string describe() const;
};

// train.deterministic's cut of the dimensions tensor parallelism splits
// (docs/determinism.md, "Tensor parallelism"), a function of the model's
// shapes alone: Q = 4, 2 or 1 pieces, the largest that divides the query
// heads, the key/value heads and the MLP's hidden width (tp must divide Q);
// and the products' column tile: the largest width up to 256 dividing every
// piece's width (C / Q, the key/value width / Q, the hidden width / Q), so
// that a shard's tiles are the whole product's there.
int canonical_pieces(const Gpt2Config& c);
int canonical_column_tile(const Gpt2Config& c);

}  // namespace gpt2
