// Checkpoints: one binary format for every stage and layout (model
// checkpoints for generation; training checkpoints that also resume a run
// exactly).
//
// Version 3 (little-endian; version 2 is the same layout):
//   "GPT2CKPT"  magic, 8 bytes
//   u32 version (3), u32 flags (bit 0: training state present)
//   u64 size of the whole file in bytes, checksum included
//   u32 count, count x (u32 length, key bytes, u32 length, value bytes)
//       the header: the resolved configuration as text key/value pairs,
//       named as in the configuration ("model.n_embd" = "384",
//       "optimizer.lr" = "0.0001", "data.tokenizer" = "word"), then the
//       training state ("state.steps_done", "state.loader_position",
//       "state.loader_batches") and what resume depends on ("train.seed",
//       "train.batch_size", "data.loader", ...). Readers find values by name.
//       Version 3 adds "run.id", the run the checkpoint belongs to
//       (train/run/run_dir.h). Resume checks every entry its curve depends on
//       (train/run/run_state.h); a version-2 file has all but the run id, a
//       version-1 file none of the data and batch entries, and resuming
//       from one names the checks it cannot make.
//   u32 count, count x (u32 length, bytes)      the tokenizer's vocabulary
//   u64 n, n x f32                              parameters, in layout order
//   [training state: n x f32 Adam m, n x f32 Adam v]
//   u64 FNV-1a 64 checksum of every byte before it
// Version 1 (the first format: the model sizes and optimizer settings at
// fixed offsets) still loads; its values come back under the same names.
// Written to "<path>.tmp" and renamed over <path>, so a crash never leaves a
// half-written checkpoint under the real name.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/optim.h"
#include "model/params.h"
#include "model/tokenizer.h"

namespace gpt2 {

inline constexpr uint32_t kCheckpointVersion = 3;

using KeyValues = std::vector<std::pair<std::string, std::string>>;

struct TrainingState {
  OptimizerConfig optimizer;
  int64_t steps_done = 0;
  int64_t loader_position = 0;
  int64_t loader_batches = 0;
  uint64_t seed = 0;
  std::vector<float> m, v;  // Adam moments, parameter layout
};

struct Checkpoint {
  uint32_t version = kCheckpointVersion;
  Gpt2Config config;
  Tokenizer tokenizer;
  std::vector<float> params;
  std::optional<TrainingState> training;
  KeyValues header;  // every header entry, by name (for a version-1 file, those it had)
  // The header value of `key`, or nullptr.
  const std::string* find(const std::string& key) const;
};

// Writes a checkpoint atomically. `optimizer` and `training` are optional
// together: with them, the checkpoint can resume training (training->m and
// ->v are ignored: the optimizer's moments are written). `extra` entries
// (what the run's resume depends on, e.g. "train.batch_size") are added to
// the header.
void save_checkpoint(const std::string& path, const Gpt2& model, const Tokenizer& tokenizer,
                     const Optimizer* optimizer = nullptr, const TrainingState* training = nullptr,
                     const KeyValues& extra = {});

// The same from host arrays of the full model (a tensor-parallel run's
// gathered shards): `params` in layout order; with `training`, its
// optimizer, steps_done, m and v are written too.
void save_checkpoint(const std::string& path, const Gpt2Config& config, std::span<const float> params,
                     const Tokenizer& tokenizer, const TrainingState* training, const KeyValues& extra = {});

// The header save_checkpoint records: the model section, data.tokenizer,
// with `training` the optimizer section, train.seed and the state.*
// counters, then `extra`.
KeyValues checkpoint_header(const Gpt2Config& config, const Tokenizer& tokenizer, const TrainingState* training,
                            const KeyValues& extra);
// The tokenizer's vocabulary as the format stores it (u32 count, then each
// entry as u32 length and bytes).
std::string vocabulary_bytes(const Tokenizer& tokenizer);
// A Checkpoint without arrays from a header and vocabulary_bytes' text (a
// sharded checkpoint's manifest, train/formats/sharded_checkpoint.h): the
// configuration, tokenizer and (with `training`) the optimizer, seed and
// counters; params, m and v stay empty. Throws std::runtime_error naming `path`.
Checkpoint checkpoint_from_header(KeyValues header, bool training, const std::string& vocabulary,
                                  const std::string& path);

// Reads and verifies a checkpoint of version 1, 2 or 3. Throws
// std::runtime_error naming the file and the problem: not a checkpoint,
// unsupported version, truncated, checksum mismatch (corrupted), a missing or
// malformed header entry, inconsistent sizes; a directory.
Checkpoint load_checkpoint(const std::string& path);

// Whether the file's bytes are whole, without parsing or holding them: read
// once in blocks, its recorded size (versions 2 and 3) and its checksum
// compared. "" when they agree, else the problem naming the file (what
// `--resume auto` checks of a checkpoint before it takes it).
std::string checkpoint_bytes_problem(const std::string& path);

// Throws std::invalid_argument naming the first field where the checkpoint's
// model configuration differs from `expected`.
void expect_same_config(const Checkpoint& ckpt, const Gpt2Config& expected, const std::string& path);

// Copies the checkpoint's parameters into a model of the same configuration
// (its shard, for a tensor-parallel model).
void load_params(const Checkpoint& ckpt, Gpt2& model);

}  // namespace gpt2
