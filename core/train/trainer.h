// The stage programs' two entry points, shared by every stage: train (with
// evaluation, checkpoints, the metrics stream and a final generation) and
// generate (from a checkpoint). A stage supplies its backend kind and its
// communicator; everything else is here, once.
#pragma once

#include <string>

#include "parallel/comm.h"
#include "kernels/backend.h"
#include "train/run_config.h"

namespace gpt2 {

struct StageContext {
  std::string stage;             // "serial", "mpi", ...
  BackendKind backend;           // how to make this stage's backend and measure its ceiling
  Communicator* comm = nullptr;  // nullptr: one process (a local communicator)
};

struct TrainRequest {
  RunConfig config;
  std::string out_dir;      // results of this run: config.yaml, metrics.jsonl, checkpoint.bin
  std::string resume;       // training checkpoint to continue from, or ""
  bool overwrite = false;   // allow an out_dir that already holds a finished run
  std::string config_file;  // for the record
  std::string hostfile;     // MPI: check the job's placement against it, or ""
};

struct InitRequest {
  RunConfig config;  // model.*, model.init, train.seed, data.corpus (the vocabulary)
  std::string out;   // the model checkpoint to write
};

struct GenerateRequest {
  RunConfig config;         // generate.* and train.threads; data.corpus for a corpus prompt
  std::string checkpoint;
  std::string prompt;       // text; if empty, the first generate.prompt_tokens corpus tokens
};

// The evaluate command (issue 46): a model's mean loss over tokens, and
// multiple-choice scoring. `model`: whatever train.init_from reads (our
// checkpoint, llm.c's model file, a Hugging Face folder); its settings
// replace the model section, its tokenizer (else data.encoder_json and
// data.vocab_bpe: GPT-2's) reads the text.
struct EvaluateRequest {
  RunConfig config;       // train.batch_size, train.seq_len, train.threads, parallel.*, train.precision, ...
  std::string model;
  std::string data;       // a folder of prepare's shards, or a text file; "" for none
  std::string split;      // shards: "val" (default) or "train"
  int64_t batches = 0;    // the first N batches of train.batch_size x train.seq_len; 0: every whole one
  std::string hellaswag;  // JSON lines in HellaSwag's format (train/multiple_choice.h); "" for none
  bool details = false;   // the multiple-choice result lists every example's losses
};

// Both throw std::invalid_argument for bad input (configuration, files) and
// std::runtime_error for failures while running; nothing already written is
// lost: results appear under their final names only when complete.
void run_train(const TrainRequest& req, const StageContext& ctx);
void run_generate(const GenerateRequest& req, const StageContext& ctx);
// Prints one JSON object on stdout (rank 0): the loss over `data` on the
// configured layout (any layout: the training step's forward, its mean over
// the global batch, as the training loop's validation computes it) and
// the multiple-choice result (on rank 0 alone with the whole model, as
// generate runs; the other ranks wait).
void run_evaluate(const EvaluateRequest& req, const StageContext& ctx);
// Writes the initial weights as a model checkpoint (the `init` command):
// computed by every rank in its backend's memory, read back, checked equal
// across ranks, written by rank 0.
void run_init(const InitRequest& req, const StageContext& ctx);

// The most threads a count may ask for (train.threads, prepare's threads,
// the benchmarks' --threads): 4 x the cores this machine reports
// (std::thread::hardware_concurrency), and at least 64. More is a mistake
// (65536 threads would exhaust the process's memory or thread limit).
int max_threads();
// `threads` when it is at most max_threads(), else std::invalid_argument
// "<what>: <threads> threads is above the limit of <max> ...".
int check_threads(int threads, const char* what);

// train.threads resolved: 0 is every core; above max_threads() refused
// (std::invalid_argument naming train.threads).
int resolve_threads(int threads);

}  // namespace gpt2
