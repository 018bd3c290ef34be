// Weights from a model file, whatever wrote it (issue 46): what
// train.init_from starts a run from.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/tokenizer.h"
#include "train/formats/checkpoint.h"

namespace gpt2 {

// load_checkpoint of a file the user named (--checkpoint, --resume): a
// run folder's step folder stands for its checkpoint, which is taken only
// when complete (train/formats/checkpoint_store.h); a sharded checkpoint folder is
// read whole (train/formats/sharded_checkpoint.h merge_sharded: generate, export); another directory, an incomplete
// checkpoint, or any of load_checkpoint's problems, is bad input, thrown as
// std::invalid_argument (the stages' exit status 2), not a failure of the run.
Checkpoint load_given_checkpoint(const std::string& path);

struct ModelWeights {
  Gpt2Config config;          // the file's model (resolved)
  std::vector<float> params;  // in our layout
  std::string format;         // "checkpoint", "llm.c" or "hf": for the log
  // The tokenizer the file keeps: a checkpoint's, a Hugging Face folder's
  // vocab.json and merges.txt (GPT-2's BPE); none in llm.c's model file.
  std::optional<Tokenizer> tokenizer;
};

// Reads `path`: a folder holding config.json (Hugging Face, export.h
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
