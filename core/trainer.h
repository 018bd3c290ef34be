// The stage programs' two entry points, shared by every stage: train (with
// evaluation, checkpoints, the metrics stream and a final generation) and
// generate (from a checkpoint). A stage supplies only its backend; the rest
// is here, once.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "backend.h"
#include "comm.h"
#include "run_config.h"

namespace gpt2 {

// What the trainer asks of a stage's backend, from the configuration.
struct BackendOptions {
  int threads = 1;    // CPU threads (train.threads, 0 resolved to every core)
  bool tf32 = false;  // train.tf32 (CUDA)
};

struct StageContext {
  std::string stage;  // "serial", "mpi", ...
  std::function<std::unique_ptr<Backend>(const BackendOptions&)> make_backend;
  Communicator* comm = nullptr;  // nullptr: one process (a local communicator)
  std::string help_note;         // stage-specific lines for --help (environment, exit codes)
};

struct TrainRequest {
  RunConfig config;
  std::string out_dir;      // results of this run: config.yaml, metrics.jsonl, checkpoint.bin
  std::string resume;       // training checkpoint to continue from, or ""
  bool overwrite = false;   // allow an out_dir that already holds a finished run
  std::string config_file;  // for the record
  std::string hostfile;     // MPI: check the job's placement against it, or ""
};

struct GenerateRequest {
  RunConfig config;         // generate.* and train.threads; data.corpus for a corpus prompt
  std::string checkpoint;
  std::string prompt;       // text; if empty, the first generate.prompt_tokens corpus tokens
};

// Both throw std::invalid_argument for bad input (configuration, files) and
// std::runtime_error for failures while running; nothing already written is
// lost: results appear under their final names only when complete.
void run_train(const TrainRequest& req, const StageContext& ctx);
void run_generate(const GenerateRequest& req, const StageContext& ctx);

// Reads a whole text file; errors name the key and the path (missing,
// unreadable, empty).
std::string read_corpus(const std::string& path);

}  // namespace gpt2
