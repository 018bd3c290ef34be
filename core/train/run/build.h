// A run's step built from its layout (StepSpec, train/resolve/layout.h):
// the arenas, the gradient reducer, the step function, the pipeline's
// recorder, this rank's memory and the stop between micro-steps; and the
// loader's rows as the step takes them (StepFeed).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "parallel/gradient_sync.h"
#include "parallel/process_grid.h"
#include "model/activations.h"
#include "model/context_parallel.h"
#include "train/resolve/layout.h"
#include "train/resolve/plan.h"
#include "train/run/checkpoint_writer.h"
#include "train/run/run_state.h"
#include "train/run/test_hooks.h"
#include "train/run/timeline.h"
#include "train/schedule/pipeline.h"
#include "train/schedule/preemption.h"
#include "train/schedule/train_step.h"

namespace gpt2 {

// The loader's rows (rows x train.seq_len) as a step takes them: the same,
// or with context parallelism (parallel.cp) this rank's head and tail chunks
// of them, microbatch by microbatch (model/context_parallel.h).
class StepFeed {
 public:
  StepFeed(const RunLayout& run, ProcessGrid& grid)
      : cp_(run.cp),
        rank_(grid.context().rank),
        // A schedule's microbatches, or train.deterministic's chunks on this replica, each cut alone.
        groups_(run.step.pipelined()                  ? run.step.microbatches
                : run.step.step == StepKind::kChunks ? run.step.chunks / run.dp
                                                      : 1),
        rows_(run.rows),
        T_(run.config.train.seq_len),
        x_(static_cast<size_t>(run.rows) * static_cast<size_t>(run.config.train.seq_len)),
        y_(x_.size()),
        cx_(cp_ > 1 ? x_.size() / static_cast<size_t>(cp_) : 0),
        cy_(cx_.size()) {}
  // Where the loader writes.
  int32_t* x() { return x_.data(); }
  int32_t* y() { return y_.data(); }
  // The loader's rows cut (nothing without context parallelism), then what the step reads.
  void cut() {
    if (cp_ == 1) return;
    context_rows(x_.data(), cx_.data(), rows_, T_, cp_, rank_, groups_);
    context_rows(y_.data(), cy_.data(), rows_, T_, cp_, rank_, groups_);
  }
  int32_t* inputs() { return cp_ > 1 ? cx_.data() : x_.data(); }
  int32_t* targets() { return cp_ > 1 ? cy_.data() : y_.data(); }

 private:
  int cp_, rank_, groups_, rows_, T_;
  std::vector<int32_t> x_, y_, cx_, cy_;
};

// The stop signal agreed inside a step (StepSpec::stop_in_step), kept for
// the stop that follows. Asks only while armed, which every rank sets alike
// at each step's end (arm: from what the ranks agreed there).
class AgreedInterrupt final : public StepInterrupt {
 public:
  AgreedInterrupt(Communicator& comm, StepSpec::StopInStep when, double long_step_s)
      : comm_(comm), when_(when), long_step_s_(long_step_s), armed_(when == StepSpec::StopInStep::kAlways) {}
  bool stop_now() override {
    if (!armed_ || !in_step) return false;
    agreed = agreed_stop(comm_);
    return agreed.signal != 0;
  }
  // kLongSteps: the steps after one that took longer than long_step_s on some rank (TestHooks: 5 s).
  void arm(const StopRequest& at_step_end) {
    if (when_ == StepSpec::StopInStep::kLongSteps) armed_ = at_step_end.step_s > long_step_s_;
  }
  StopRequest agreed;
  bool in_step = false;  // only a training step stops inside (not validation's forwards through ZeRO's units)

 private:
  Communicator& comm_;
  StepSpec::StopInStep when_;
  double long_step_s_;
  bool armed_;
};

// The run's step, built once from the configuration (DESIGN.md "Memory":
// one step function per layout): the activation arena, or the pipeline's
// arenas; the gradient reducer; the step function; the pipeline's recorder;
// this rank's memory; the stop between micro-steps.
struct StepMachine {
  std::unique_ptr<AgreedInterrupt> interrupt;
  std::unique_ptr<PipelineEngine> pipe;
  std::optional<ActivationArena> arena;
  std::unique_ptr<GradReducer> reducer;
  std::unique_ptr<StepFunction> step;
  std::optional<PipelineRecorder> recorder;
  RankMemory mem;
};

std::unique_ptr<StepMachine> build_step(const RunLayout& run, RunState& st, ProcessGrid& grid, double max_loss,
                                        double long_step_s = TestHooks{}.long_step_s);

// A training run's pieces, built from its layout alone: the state (from
// `source`), the divergence bound, the step and its arenas, the checkpoint
// writer (the layout's CheckpointSink). The loop (train/run/trainer.cpp)
// drives them; nothing here reads the settings again.
struct Run {
  std::unique_ptr<RunState> state;
  double max_loss = 0;  // train.max_loss, or three times the loss of a uniform guess over the resolved vocabulary
  std::unique_ptr<StepMachine> step;
  std::unique_ptr<CheckpointWriter> writer;
};

// Collective. `threads`: train.threads resolved on this machine;
// `note`: the log's notes (an asynchronous save's completion). The state is
// made first (init_or_resume), then the step, then the writer.
Run build_run(const RunLayout& run, const StateSource& source, const BackendKind& kind, int threads,
              ProcessGrid& grid, std::function<void(const std::string&)> note, const TestHooks& hooks);

}  // namespace gpt2
