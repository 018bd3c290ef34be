// Checkpoints: one binary format for every stage (model checkpoints for
// generation, training checkpoints that also resume a run exactly).
//
// Layout (little-endian), version 1:
//   "GPT2CKPT"  magic, 8 bytes
//   u32 version, u32 flags (bit 0: training state present)
//   i32 V, T, L, NH, C                       the model configuration
//   u8 tokenizer kind, u32 count, count x (u32 length, bytes)   the vocabulary
//   u64 n, n x f32                           parameters, in layout order
//   [training state: u32 optimizer kind, f32 lr, min_lr, i64 warmup_steps,
//    decay_steps, f32 beta1, beta2, eps, weight_decay, grad_clip,
//    i64 steps done, i64 loader position, i64 loader batches served,
//    u64 seed, n x f32 Adam m, n x f32 Adam v]
//   u64 FNV-1a 64 checksum of every byte before it
// Written to "<path>.tmp" and renamed over <path>, so a crash never leaves a
// half-written checkpoint under the real name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config.h"
#include "hash.h"
#include "optim.h"
#include "params.h"
#include "tokenizer.h"

namespace gpt2 {

inline constexpr uint32_t kCheckpointVersion = 1;

struct TrainingState {
  OptimizerConfig optimizer;
  int64_t steps_done = 0;
  int64_t loader_position = 0;
  int64_t loader_batches = 0;
  uint64_t seed = 0;
  std::vector<float> m, v;  // Adam moments, parameter layout
};

struct Checkpoint {
  Gpt2Config config;
  Tokenizer tokenizer;
  std::vector<float> params;
  std::optional<TrainingState> training;
};

// Writes a checkpoint atomically. `optimizer` and `training` are optional
// together: with them, the checkpoint can resume training.
void save_checkpoint(const std::string& path, const Gpt2& model, const Tokenizer& tokenizer,
                     const Optimizer* optimizer = nullptr, const TrainingState* training = nullptr);

// Reads and verifies a checkpoint. Throws std::runtime_error naming the file
// and the problem: not a checkpoint, unsupported version, truncated, checksum
// mismatch (corrupted), inconsistent sizes.
Checkpoint load_checkpoint(const std::string& path);

// Throws std::invalid_argument naming the first field where the checkpoint's
// model configuration differs from `expected`.
void expect_same_config(const Checkpoint& ckpt, const Gpt2Config& expected, const std::string& path);

// Copies the checkpoint's parameters into a model of the same configuration.
void load_params(const Checkpoint& ckpt, Gpt2& model);

}  // namespace gpt2
