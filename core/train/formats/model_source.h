// Weights from a model file, whatever wrote it (issue 46): what
// train.init_from starts a run from.
#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/tokenizer.h"
#include "train/config/run_config.h"
#include "train/formats/checkpoint.h"
#include "train/formats/sharded_checkpoint.h"

namespace gpt2 {

// load_checkpoint of a file the user named (--checkpoint, --resume): a
// run folder's step folder stands for its checkpoint, which is taken only
// when complete (train/formats/checkpoint_store.h); a sharded checkpoint folder is
// read whole (train/formats/sharded_checkpoint.h merge_sharded: generate, export); another directory, an incomplete
// checkpoint, or any of load_checkpoint's problems, is bad input, thrown as
// std::invalid_argument (the stages' exit status 2), not a failure of the run.
Checkpoint load_given_checkpoint(const std::string& path);

// What a rank's training checkpoint costs it in `format` (the plan asks the
// format, issue 69): one file, world rank 0 (`root`) writes and reads the
// whole model's three arrays (header and vocabulary besides), the others
// nothing (they receive their part from rank 0); sharded, the bytes of the
// rank's own file (`written`: its part and the floats it owns) and of the
// arrays it reads back to resume: the moments' ranges it holds and the
// parameters' ranges it holds.
struct CheckpointBytes {
  uint64_t write = 0, read = 0;
};
struct RankHolding {
  bool root = false;
  RankPart written;
  std::vector<ShardRange> moments_read, params_read;
};
CheckpointBytes checkpoint_bytes(CheckpointFormat format, const Gpt2Config& cfg, const RankHolding& holding);

// Whether a stored checkpoint's bytes are whole (a step folder's file():
// checkpoint.bin, checkpoint_bytes_problem; or a sharded folder: its manifest
// and every rank file's checksum), read once, nothing held. "" or the problem.
std::string stored_checkpoint_problem(const std::filesystem::path& file);

struct ModelWeights {
  Gpt2Config config;          // the file's model (resolved)
  std::vector<float> params;  // in our layout
  std::string format;         // "checkpoint", "llm.c" or "hf": for the log
  // The tokenizer the file keeps: a checkpoint's, a Hugging Face folder's
  // vocab.json and merges.txt (GPT-2's BPE); none in llm.c's model file.
  std::optional<Tokenizer> tokenizer;
};

// One model file format, its reader and writer side by side (issue 69):
// ours (train/formats/checkpoint.h; a run's step folder or a sharded
// folder read whole), llm.c's model file and Hugging Face's safetensors
// folder (train/formats/llmc_hf.h). model_formats() lists them in the order
// a given path is tried, the one place its format is decided.
class ModelFormat {
 public:
  virtual ~ModelFormat() = default;
  // "checkpoint", "llm.c", "hf": the name ModelWeights::format and the log give.
  virtual const char* name() const = 0;
  // Whether `path` is this format's: `folder` (a directory), `magic` its first 8 bytes (zeros for a folder or
  // a shorter file).
  virtual bool recognises(const std::filesystem::path& path, bool folder, const char (&magic)[8]) const = 0;
  // The weights of `path` (its readers' errors as std::invalid_argument or std::runtime_error).
  virtual ModelWeights read(const std::string& path) const = 0;
  // `params` of the model `cfg` written at `out` (with `tok`, where the format keeps a tokenizer).
  virtual void write(const std::string& out, const Gpt2Config& cfg, std::span<const float> params,
                     const Tokenizer& tok) const = 0;
};
// In the order a path is tried: hf (a folder with config.json), llm.c (its magic), ours.
const std::vector<const ModelFormat*>& model_formats();
// The format called `name` ("checkpoint", "llm.c" or "llmc", "hf"), or nullptr.
const ModelFormat* model_format(const std::string& name);

// Reads `path` with the first of model_formats() that recognises it: a folder holding config.json (Hugging Face,
// read_hf_gpt2), another folder (a run's step folder or a sharded
// checkpoint: load_given_checkpoint), or a file, told by its first bytes:
// our checkpoint ("GPT2CKPT", model or training: its weights only) or
// llm.c's model file (fp32 or bf16). Throws std::invalid_argument naming
// `key` and the file: missing, of no known format, or its readers' errors.
ModelWeights read_model_weights(const std::string& path, const std::string& key);

// The file's weights laid out for the model `want` (resolved): the same
// tensors of the same shapes, except that the embedding rows past the real
// ids may differ in number (llm.c's and our padded vocabularies against
// Hugging Face's 50,257: padding rows are zeros, and rows past the real ids
// are dropped; neither is ever read). Else throws std::invalid_argument in
// one line naming `key`, the first tensor that differs and both shapes (or
// the first other setting that differs).
std::vector<float> fit_weights(const ModelWeights& w, const Gpt2Config& want, const std::string& key,
                               const std::string& path);

}  // namespace gpt2
