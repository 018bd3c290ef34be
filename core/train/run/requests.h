// What a stage program asks of the engine: which program it is (its backend
// and communicator) and each command's request, read by run_train,
// run_generate, run_evaluate and run_init (train/run/trainer.h).
#pragma once

#include <cstdint>
#include <string>

#include "parallel/comm.h"
#include "kernels/backend.h"
#include "train/config/run_config.h"
#include "train/run/test_hooks.h"

namespace gpt2 {

struct ProgramContext {
  std::string program;           // the stage program: "serial", "mpi", ...
  BackendKind backend;           // how to make this stage's backend and measure its ceiling
  Communicator* comm = nullptr;  // nullptr: one process (a local communicator)
  TestHooks hooks;               // the tests' faults and delays (GPT2_TEST_HOOKS); none by default
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
  std::string hellaswag;  // JSON lines in HellaSwag's format (train/evaluate/multiple_choice.h); "" for none
  bool details = false;   // the multiple-choice result lists every example's losses
};

}  // namespace gpt2
