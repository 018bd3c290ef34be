// The metrics stream's records (DESIGN.md contract 2): one JSON object per
// line of a run's metrics.jsonl,
//   {"event":"step","step":s,"loss":..,"lr":..,"grad_norm":..,"step_ms":..,"tokens_per_s":..,
//    "flops_per_s":..,"mfu":..,"comm_ms":..,"comm_bytes":..,
//    "tp_calls":..,"tp_bytes":..,"dp_calls":..,"dp_bytes":..,"pp_calls":..,"pp_bytes":..,"cp_calls":..,"cp_bytes":..
//    [,"stage_wait_ms":[..],"stage_arenas":[..]]}   (the last two with pipeline stages or microbatches)
//   {"event":"eval","step":s,"val_loss":..}
//   {"event":"summary","status":"ok","steps":..,"train_s":..,"inference_s":..,"final_loss":..,
//    ...,"provenance":{...}}
// One schema, written by the stage programs (train/run/run_logger.h) and read by
// the harness, through the code below and nothing else. Step s counts from 0;
// its loss is the loss before update s (the original's "epoch s"). Values are
// written at the precision they mean (7 significant digits for a loss, 1 us
// for a time), not as 17-digit doubles.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "util/json.h"

namespace gpt2 {

struct StepRecord {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double step_ms = 0, tokens_per_s = 0, flops_per_s = 0, mfu = 0;
  double comm_ms = 0;       // time in gradient and loss collectives (0 for one process)
  uint64_t comm_bytes = 0;  // bytes this rank passed to collectives in the step (tp_bytes + dp_bytes)
  // This rank's collective calls and their bytes in the step, by group: its
  // tensor-parallel group's (activations, their gradients, the shards' norm)
  // and its data-parallel group's (the gradient sum, the loss). A call's
  // bytes are its buffer's (an allreduce of n floats: 4n), not the wire's.
  uint64_t tp_calls = 0, tp_bytes = 0, dp_calls = 0, dp_bytes = 0;
  // Its pipeline group's: activations and their gradients between stages,
  // the loss from the last stage, the stages' gradient norms.
  uint64_t pp_calls = 0, pp_bytes = 0;
  // Its context-parallel ring's: key/value blocks and their gradients (each
  // shift a non-blocking send and a receive: two calls, the block's bytes each).
  uint64_t cp_calls = 0, cp_bytes = 0;
  // With a pipeline (or microbatches), per world rank: the milliseconds of
  // the step spent waiting for a pipeline peer (receives, and sends whose
  // buffer was needed again) and the most activation arenas in use at once.
  std::vector<double> stage_wait_ms;
  std::vector<int> stage_arenas;
  // This rank's memory in the step, in bytes, as the engine allocated it:
  // parameters and gradients held (ZeRO-2/3: their shards), optimizer moments,
  // activations (arenas in use x an arena's bytes), parameters gathered at
  // peak (ZeRO-3's working slots), communication buffers (ZeRO-2/3's gradient
  // slots: one computing, one reduce-scattering), and the process's peak
  // resident set so far (getrusage; 0 = not recorded).
  uint64_t mem_params = 0, mem_grads = 0, mem_moments = 0, mem_activations = 0;
  uint64_t mem_gathered = 0, mem_comm_buffers = 0;
  double peak_rss_mb = 0;
  // train.layer_grad_norms: the gradient's 2-norm per group before clipping:
  // the embeddings, each layer, then the head (final norm and lm_head); else empty.
  std::vector<double> layer_grad_norms;
};

struct EvalRecord {
  int64_t step = 0;
  double val_loss = 0;
};

struct RunSummary {
  std::string status = "ok";
  int64_t steps = 0;       // train.steps: the run ends at this step
  int64_t first_step = 0;  // > 0: resumed from a checkpoint at this step
  int ranks = 1;
  double train_s = 0;       // sum of the step times
  double train_wall_s = 0;  // wall clock of the loop, evaluation and checkpoints included
  double comm_s = 0;
  double inference_s = 0;
  double final_loss = 0;
  double tokens_per_s = 0;
  double peak_rss_mb = 0;
  int64_t generated_tokens = 0;
  std::string generated_text;
  std::string checkpoint;  // path, or "" when none was written
  // FNV-1a 64 (16 hex digits) of the checkpoint's parameters, then its two
  // Adam moments (the whole model's float bytes, in the checkpoint's order):
  // runs with equal bits have equal hashes ("" when no checkpoint was
  // written, but for train.deterministic, whose state is always hashed).
  std::string state_hash;
  // Progress lines the console dropped because stderr or stdout did not take
  // them (util/console.h); they are lost from the console only.
  int64_t console_dropped_lines = 0;
  Json provenance = Json::object();
};

Json to_json(const StepRecord& r);
Json to_json(const EvalRecord& r);
Json to_json(const RunSummary& r);

// The record of one line, by its "event"; `where` names file and line in errors.
enum class RecordKind { kStep, kEval, kSummary, kOther };
RecordKind record_kind(const Json& line);
StepRecord step_record(const Json& line, const std::string& where);
EvalRecord eval_record(const Json& line, const std::string& where);
RunSummary run_summary(const Json& line, const std::string& where);

struct MetricsStream {
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  std::optional<RunSummary> summary;
};

// Reads a whole metrics.jsonl. Throws std::runtime_error "<path>:<line>: ..."
// for a line that is not JSON or a record missing a field.
MetricsStream read_metrics_stream(const std::filesystem::path& path);

}  // namespace gpt2
