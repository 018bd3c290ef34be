// GPT-2 forward and backward as flat lists of kernel calls (llm.c style):
// the backward list is the forward list reversed. No autograd graph; every
// tensor is a view into the parameter, gradient or activation buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/activations.h"
#include "kernels/backend.h"
#include "model/params.h"

namespace gpt2 {

// Told by the backward pass whenever a suffix of the gradient buffer is
// final: grads[offset, end) will not change again this step. Data
// parallelism starts the allreduce of finished buckets from here
// (parallel/gradient_sync.h) while the rest of the backward pass runs.
class GradReadyHook {
 public:
  virtual ~GradReadyHook() = default;
  virtual void ready(size_t offset) = 0;
};

// Told before and after each unit (model/params.h, ParamUnit) of a forward
// or backward pass: what ZeRO-3 gathers a unit's weights by (acquire binds
// them, release frees them) and ZeRO-2 hands out and collects a unit's
// gradient by (parallel/zero.h). A model whose views are all resident needs none.
// Units come in pass order: embeddings, layers, head forward; head, layers
// from the last, embeddings backward. Within a pass, acquire(u) comes after
// release of the unit before it, so a hook may prefetch one unit ahead.
enum class Pass { kForward, kBackward };
class UnitHook {
 public:
  virtual ~UnitHook() = default;
  virtual void acquire(const ParamUnit& unit, Pass pass) = 0;
  virtual void release(const ParamUnit& unit, Pass pass) = 0;
};

// Tensor parallelism (model.tp(), model/tensor_parallel.h): with P > 1 ranks
// every call below is collective over the model's tensor-parallel group (all
// its ranks call it, in the same order, on their own shards); the logits,
// the loss and the gradients of replicated parameters come out the same on
// every rank of the group.
//
// Pipeline stages (model.stage(), model/params.h): a model that holds one
// stage runs that stage's part. The first stage embeds `tokens`; a later one
// starts from acts.encoded, which the caller filled (the previous stage's
// output). The last stage ends with the head and the loss; an earlier one
// stops at its last layer's residual3 (what the caller sends on) and
// returns 0. Backward mirrors it: the last stage starts from the loss, an
// earlier one from acts.dresidual as the caller filled it (the gradient at
// its output); the first stage ends with the embeddings' gradients, a later
// one leaves the gradient at its input in acts.dresidual.
//
// Runs the model on tokens (B,T). With targets (B,T) it also computes the
// per-position losses and returns their mean; without (nullptr) it stops at
// the logits and returns 0. B and T are the arena's.
// `pos0` (RoPE models only) is the position of the first row: generation
// recomputing a window that slid past the start passes the window's first
// token index, so rotations match those of its KV cache.
// `units` (optional): told around each unit's part (ZeRO-3); nullptr for a
// model whose parameters are resident.
float gpt2_forward(Backend& be, const Gpt2& model, Activations& acts, const int32_t* tokens,
                   const int32_t* targets, int pos0 = 0, UnitHook* units = nullptr);

// Accumulates d(loss)/d(parameters) into model.grads, where loss is
// dloss * (sum of the per-position losses): dloss = 1 / (B*T) gives the
// gradient of the mean; data-parallel ranks pass 1 / (global B*T). Needs the
// activations of a forward pass with targets; overwrites the logits.
// `hook` (optional) hears each time a suffix of the gradient buffer is final:
// after the head, after each block (from the last; after a private run's
// first block for the whole run), after the embeddings.
//
// `part` splits the pass as the zero-bubble pipeline runs it (Qi et al.,
// 2024): kInput (B) computes every input gradient, the LayerNorm and bias-free
// steps and the embeddings, keeping the gradients at the matrix products'
// outputs in the arena's d_* tensors (an arena made with split_backward);
// kWeight (W), later, computes the matrix products' weight and bias
// gradients from them. B then W accumulates exactly what kAll does, with the
// same products in the same order. Layers of a private run (spd, parallel)
// do all their work in B. `hook` is heard with kAll only.
enum class BackwardPart { kAll, kInput, kWeight };
// `units` (optional, kAll only): told around each unit's backward (ZeRO-2, ZeRO-3).
void gpt2_backward(Backend& be, Gpt2& model, Activations& acts, const int32_t* tokens,
                   const int32_t* targets, float dloss, GradReadyHook* hook = nullptr,
                   BackwardPart part = BackwardPart::kAll, UnitHook* units = nullptr);

// One token of generation with a key/value cache: runs `token` at position
// `position` on an arena of B = 1, T = 1. qkv_cache[l] (1, T, qkv width)
// holds layer l's q, k, v rows 0 .. row-1 (this rank's heads: width / P);
// this call writes row `row` and attends over rows 0 .. row. The logits for
// the next token are in acts.logits (1,1,V). With learned positions the row
// is the position (position -1: the same); with RoPE the cache may hold a
// window that slid, row < position, since its keys carry their own rotation.
void gpt2_decode(Backend& be, const Gpt2& model, Activations& acts, const std::vector<Tensor>& qkv_cache,
                 int32_t token, int row, int position = -1);

}  // namespace gpt2
