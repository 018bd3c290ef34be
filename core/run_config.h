// RunConfig: every setting of a training or generation run, and the one list
// of fields (key, default, help) that drives YAML parsing, command-line
// overrides, --help and the resolved copy written next to the results.
//
// A field's key is "section.name" (e.g. train.steps): in YAML it is `name`
// under the mapping `section`; on the command line it is `--section.name V`
// or `--section.name=V`. Unknown keys are errors with a "did you mean" hint.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config.h"
#include "optim.h"

namespace gpt2 {

struct RunConfig {
  // model: the original's configuration by default; vocab_size 0 = the
  // tokenizer's vocabulary size.
  int vocab_size = 0;
  int block_size = 256;
  int n_layer = 6;
  int n_head = 6;
  int n_embd = 384;
  // data
  std::string corpus;          // path; relative paths in a YAML file are relative to that file
  std::string tokenizer = "word";
  std::string loader = "sequential";
  double val_fraction = 0.0;
  // train
  int batch_size = 16;         // global batch rows
  int seq_len = 256;
  int steps = 50;              // optimizer steps (the original's "epochs")
  uint64_t seed = 1337;
  int threads = 0;             // 0: every core
  int eval_every = 0;          // validation loss every N steps; 0: never
  int eval_batches = 4;
  int checkpoint_every = 0;    // training checkpoint every N steps; 0: at the end only
  bool save_checkpoint = true; // false: write no checkpoint at all (benchmark runs)
  bool tf32 = false;           // CUDA stages: cuBLAS may use TF32 tensor cores
  double peak_gflops = 0.0;    // MFU denominator; 0: measure SGEMM at start-up
  double grad_bucket_mb = 0.0; // data parallel: allreduce buckets overlapping backward; 0: one allreduce
  // optimizer
  std::string optimizer = "adam_original";
  double lr = 1e-4;
  double min_lr = 1e-5;
  int64_t warmup_steps = 0;
  int64_t decay_steps = 10000;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double grad_clip = 1.0;
  // generate
  int prompt_tokens = 256;     // prompt = the first N corpus tokens (unless --prompt)
  int max_new_tokens = 30;
  double temperature = 0.0;    // 0: greedy
  int top_k = 0;
  bool kv_cache = false;
  uint64_t sample_seed = 0;
  // debug (test-only): make rank fail_rank throw at step fail_step
  int fail_rank = -1;
  int fail_step = -1;

  Gpt2Config model_config(int tokenizer_vocab) const;  // resolves vocab_size 0
  OptimizerConfig optimizer_config() const;
};

struct FieldInfo {
  std::string key;       // "train.steps"
  std::string type;      // "int", "float", "string", "bool", "path"
  std::string help;
  std::function<std::string()> get;                       // current value as text
  std::function<void(const std::string& text)> set;       // parses; throws std::invalid_argument
};

// The fields of `c`, bound to it, in documentation order.
std::vector<FieldInfo> fields(RunConfig& c);

// Sets one field from text. `where` prefixes errors (e.g. "--train.steps" or
// "exp.yaml:12"). Throws std::invalid_argument for unknown keys (with a "did
// you mean" hint) and values of the wrong type.
void set_field(RunConfig& c, const std::string& key, const std::string& text, const std::string& where);

// Reads a YAML file of sections into `c`. Errors name the file, line and key.
// Relative paths are resolved against the file's directory.
void load_yaml(RunConfig& c, const std::string& path);

// Range and consistency checks after all sources are applied; errors name the key.
void validate(const RunConfig& c);

// The resolved configuration as YAML (every field, by section).
std::string to_yaml(RunConfig c);

// "--help" text for the fields of the given sections.
std::string fields_help(const std::vector<std::string>& sections);

// Closest known key to `key` by edit distance, or "" if none is close.
std::string closest_key(const std::string& key, const std::vector<std::string>& known);

}  // namespace gpt2
