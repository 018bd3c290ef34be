// Context parallelism as the model sees it (parallel.cp; DESIGN.md
// "Sequence and context parallelism"): the cp ranks of a group share every
// row of their batch, each holding 2 of its 2 cp chunks of L = T / (2 cp)
// tokens: chunk r (the head) and chunk 2 cp - 1 - r (the tail), so that
// every rank has the same causal work (Megatron's and torchtitan's
// load-balanced order). Everything but the attention is per token and runs
// on a rank's own chunks; the attention is a ring (Liu et al. 2023, "Ring
// Attention"): each rank's packed keys and values are sent on to the next
// rank (the send started before the block held is computed, the receive at
// the turn's end: docs/context_parallel.md "The ring"), each block's partial output
// merged by its log-sum-exp (Backend::attention_block_forward); the backward
// passes the keys and values round again, their gradients travelling with
// them back to their owners.
//
// An arena cut this way (TpShape::context) holds B = 2 m arena rows of L
// tokens for m rows of the batch: rows [0, m) their head chunks, rows
// [m, 2 m) their tail chunks, in the batch's row order (context_rows
// arranges a loader's rows so). Positions follow the chunks: the head
// chunk's row t sits at position r L + t, the tail's at (2 cp - 1 - r) L + t.
// The group itself is a Communicator's (parallel/process_grid.h); this layer
// names the interface only, as tensor_parallel.h does for TpGroup.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/tensor.h"

namespace gpt2 {

// The ring of one context-parallel group: each rank sends to rank + 1 and
// receives from rank - 1 (mod size).
class CpGroup {
 public:
  virtual ~CpGroup() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // One step of the ring in two halves, so that compute runs between them:
  // start sending `send` to the next rank and receiving the previous rank's
  // block into `recv` (as many floats); both must stay untouched until
  // finish_shift returns, when `recv` holds it. One step in flight at a time.
  virtual void start_shift(Tensor send, Tensor recv) = 0;
  virtual void finish_shift() = 0;
  // Called between the block pairs of a turn: lets a started step advance
  // where the group can (MPICH moves a message above its eager limit only
  // inside its calls, once both sides have posted theirs).
  virtual void progress() = 0;
  // train.sequence_pieces (kernels/sequence_pieces.h): collectives in the
  // canonical tree's order over the group (a power of two). all_gather:
  // full = every rank's `shard` in rank order. tree_reduce_scatter: shard =
  // the balanced tree's sum over the ranks of every rank's block of `full`
  // at this rank's place (full is overwritten). tree_sum: x = the tree's sum
  // of every rank's x, by recursive doubling (partners rank ^ 1, rank ^ 2,
  // ...; a + b == b + a, so every rank holds the same bits). A group without
  // them throws std::logic_error.
  virtual void all_gather(Tensor shard, Tensor full);
  virtual void tree_reduce_scatter(Tensor full, Tensor shard);
  virtual void tree_sum(Tensor x);
  virtual double tree_sum(double x);
};

// One rank's place in its context-parallel group; size 1: no cut.
struct ContextCut {
  int size = 1;
  int rank = 0;
  CpGroup* group = nullptr;  // required when size > 1

  bool on() const { return size > 1; }
  // The chunk (of 2 size) that half `part` of an arena holds: 0 the head, 1 the tail.
  int chunk(int part) const { return part == 0 ? rank : 2 * size - 1 - rank; }
};

// Half `part` of an arena tensor of B rows ((B, L, W), or the log-sum-exps'
// (B, NH, L)): its rows [part B/2, (part + 1) B/2), the head chunks (0) or
// the tail chunks (1).
Tensor context_half(Tensor t, int part);

// The ring attention of an arena cut by `cp` (x.atty, x.att_lse from x.qkv,
// as Backend::attention_forward's, for the arena's chunks): collective over
// cp.group. `kv` holds two buffers of the packed keys and values of the
// arena (2, B, L, 2 KVH HS): the block computed and the block arriving.
void ring_attention_forward(Backend& be, const ContextCut& cp, Tensor out, Tensor lse, Tensor qkv, Tensor kv, int NH,
                            int KVH);
// Its backward: dqkv (=, as Backend::attention_backward's) from dout and the
// forward's out, lse and qkv. `kv` as above; `dkv` two buffers of the same
// shape, the gradient travelling with the block and the one arriving.
void ring_attention_backward(Backend& be, const ContextCut& cp, Tensor dqkv, Tensor dout, Tensor out, Tensor lse,
                             Tensor qkv, Tensor kv, Tensor dkv, int NH, int KVH);

// train.sequence_pieces (kernels/sequence_pieces.h, PieceOps): the causal
// attention of an arena's rows (cut by `cp`, or whole rows) against every
// row's keys and values whole. Under cp every rank's qkv is all-gathered
// into `whole` (m, T, W) in position order, through `blocks`; serial reads
// its own. The backward's dK and dV are this rank's subtree of the pair
// tree over every key position (into `dkv`), which a tree reduce-scatter
// over the group finishes and brings home; dqkv is overwritten.
struct PieceBuffers {
  std::vector<float> whole, blocks, dkv, home;
  std::vector<float> head;  // a tied head's gradient tree (V, C): the model's (model.cpp)
};
void pieces_attention_forward(Backend& be, const ContextCut& cp, Tensor out, Tensor lse, Tensor qkv, int NH, int KVH,
                              PieceBuffers& buf);
void pieces_attention_backward(Backend& be, const ContextCut& cp, Tensor dqkv, Tensor dout, Tensor out, Tensor lse,
                               Tensor qkv, int NH, int KVH, PieceBuffers& buf);

// A batch's `rows` rows of T tokens as the arena rows of context-parallel
// rank `cp_rank` of `cp`: for each of `groups` consecutive groups of the rows
// (a schedule's microbatches), its rows' head chunks, then their tail chunks
// (L = T / (2 cp) tokens each). `out` holds rows x T / cp tokens.
void context_rows(const int32_t* in, int32_t* out, int rows, int T, int cp, int cp_rank, int groups);

}  // namespace gpt2
