#include "train/run/build.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <thread>

#include "parallel/gradient_sync.h"
#include "parallel/process_grid.h"
#include "model/activations.h"
#include "model/flops.h"
#include "train/run/run_state.h"
#include "train/schedule/pipeline.h"
#include "train/schedule/train_step.h"
#include "util/console.h"
#include "util/provenance.h"
#include "train/run/memory.h"

namespace gpt2 {

std::unique_ptr<StepMachine> build_step(const RunLayout& run, RunState& st, ProcessGrid& grid, double max_loss,
                                        double long_step_s) {
  const StepSpec& sl = run.step;
  const TrainConfig& train = run.config.train;
  if (sl.stored == Dtype::bf16 && !st.backend->accepts_bf16()) {  // the layout's stage rule and the backend disagree
    throw std::logic_error(fmt::format("the {} backend does not take the bf16 activations the layout stores",
                                       st.backend->name()));
  }
  auto lay = std::make_unique<StepMachine>();
  Backend& be = *st.backend;
  Gpt2& model = *st.model;
  // The gradient sum and the loss over the data-parallel group; the
  // tensor-parallel sums happen inside the model (model.tp()).
  Communicator& dp = sl.over_replicas ? grid.replica_comm() : grid.dp_comm();
  if (sl.stop_in_step != StepSpec::StopInStep::kNever) {
    lay->interrupt = std::make_unique<AgreedInterrupt>(grid.aux_comm(), sl.stop_in_step, long_step_s);
    if (sl.grad_sum == GradSum::kUnitShards) {  // ZeRO-2/3: also before each unit
      st.homes.units->before_unit([i = lay->interrupt.get()] {
        if (i->stop_now()) throw StepAbandoned();
      });
    }
  }
  const StepParts parts{be, model, *st.opt, dp, run.shape.batch_size, max_loss, train.layer_grad_norms,
                        lay->interrupt.get()};
  // The reducer (none for the tree and for unit shards, which the step drives itself).
  switch (sl.grad_sum) {
    case GradSum::kBuckets:
      lay->reducer = std::make_unique<GradientSync>(dp, model.grad_data(), model.num_params(),
                                                    static_cast<size_t>(train.grad_bucket_mb * (1 << 20) / sizeof(float)));
      break;
    case GradSum::kContiguousShards:
      lay->reducer =
          std::make_unique<ContiguousShardSync>(dp, model.param_data(), model.grad_data(), st.homes.contiguous->chunk);
      break;
    case GradSum::kUnitShards:
    case GradSum::kTree:
      break;
  }
  // Under train.deterministic: the tree's gradient scattered into the contiguous shards
  // (canonical_reduce_scatter) or ZeRO-3's unit pieces, else whole.
  TreeShards shards;
  if (sl.grad_sum == GradSum::kContiguousShards) shards = {st.homes.contiguous->chunk, lay->reducer.get(), nullptr};
  if (sl.grad_sum == GradSum::kUnitShards) shards.zero3 = st.homes.units.get();
  const ArenaSpec arena = sl.arena(run.shape.seq_len, grid.context());  // one arena's (a microbatch's) rows
  if (sl.pipelined()) {  // the schedule's arenas, one per microbatch in flight
    lay->pipe = std::make_unique<PipelineEngine>(be, model, grid.pp_comm(), st.stage_split, sl.schedule,
                                                 sl.microbatches, arena, sl.microbatch_sum);
    lay->recorder.emplace(grid, *lay->pipe);
  } else {
    lay->arena.emplace(model, arena);
  }
  switch (sl.step) {
    case StepKind::kReplica:
      lay->step = sl.grad_sum == GradSum::kUnitShards ? sharded_step(parts, lay->arena->acts(), *st.homes.units)
                                                      : data_parallel_step(parts, lay->arena->acts(), *lay->reducer);
      break;
    case StepKind::kPipeline:
      lay->step = pipelined_step(parts, *lay->pipe, grid.pp_comm(), *lay->reducer);
      break;
    case StepKind::kChunks:  // canonical chunks, their tree, recursive doubling
      lay->step = deterministic_step(parts, lay->arena->acts(), sl.chunks, shards);
      break;
    case StepKind::kChunkPipeline:  // the stages' microbatches are the canonical chunks
      lay->step = deterministic_pipelined_step(parts, *lay->pipe, grid.pp_comm(), sl.chunks, shards);
      break;
  }
  lay->mem = rank_memory(st, lay->pipe.get(), lay->arena ? &*lay->arena : nullptr, grid.dp());
  if (sl.step == StepKind::kChunks) {
    lay->mem.comm_buffers +=
        deterministic_buffer_floats(model.num_params(), sl.chunks, dp.size(), shards.chunk, shards.zero3 == nullptr) *
        sizeof(float);
  } else if (sl.step == StepKind::kChunkPipeline) {
    lay->mem.comm_buffers += (static_cast<uint64_t>(PipelineEngine::tree_buffers(lay->pipe->arenas(),
                                                                                 sl.microbatches)) +
                              (grid.dp() > 1 ? 1 : 0)) * model.num_params() * sizeof(float);
  }
  return lay;
}

Run build_run(const RunLayout& run, const StateSource& source, const BackendKind& kind, int threads,
              ProcessGrid& grid, std::function<void(const std::string&)> note, const TestHooks& hooks) {
  Run r;
  r.state = init_or_resume(run, source, kind, threads, 0, grid);
  const double max_loss = run.config.train.max_loss;
  r.max_loss = max_loss > 0 ? max_loss : 3.0 * std::log(r.state->model_config.V);
  // The step and its arenas see the rows as run.shape says (context parallelism's chunks).
  r.step = build_step(run, *r.state, grid, r.max_loss, hooks.long_step_s);
  r.writer = make_checkpoint_writer(run.checkpoints, checkpoint_record(run.config, *r.state), std::move(note),
                                    hooks.checkpoint_delay_s);
  return r;
}

}  // namespace gpt2
