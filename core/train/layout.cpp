// The step a run takes, decided once (see layout.h).
#include "train/layout.h"

#include <fmt/format.h>

#include "train/plan.h"

namespace gpt2 {

std::string to_string(StepKind k) {
  switch (k) {
    case StepKind::kReplica: return "replica";
    case StepKind::kPipeline: return "pipeline";
    case StepKind::kChunks: return "canonical chunks";
    case StepKind::kChunkPipeline: return "canonical pipeline";
  }
  return "?";
}

std::string to_string(GradSum g) {
  switch (g) {
    case GradSum::kBuckets: return "allreduce in buckets";
    case GradSum::kContiguousShards: return "contiguous shards";
    case GradSum::kUnitShards: return "unit shards";
    case GradSum::kTree: return "tree";
  }
  return "?";
}

BackendOptions backend_options(const RunConfig& c, const Gpt2Config& model, int threads, int device_hint) {
  return BackendOptions{threads, c.train.tf32, device_hint, c.train.bf16(), c.train.deterministic,
                        c.train.deterministic ? canonical_column_tile(model) : 0};
}

int deterministic_pieces(const RunConfig& c, const Gpt2Config& model, int tp, const std::string& backend) {
  if (!c.train.deterministic || c.train.bf16() || backend != "cpu") return 0;
  const int q = canonical_pieces(model);
  return q % tp == 0 ? q : 0;
}

StepLayout resolve_step(const RunConfig& c, int dp, int rows, Dtype stored) {
  StepLayout s;
  s.zero = zero_layout(c, dp);
  s.stored = stored;
  s.recompute_full = c.train.recompute_full();
  s.microbatches = c.parallel.microbatches;
  s.schedule = parse_schedule(c.parallel.schedule);
  if (c.train.deterministic) {
    // The chunks, and a pipeline only with stages: microbatches without stages are the chunks themselves.
    s.chunks = canonical_chunks(c);
    s.step = c.parallel.pp > 1 ? StepKind::kChunkPipeline : StepKind::kChunks;
    s.grad_sum = s.zero.contiguous ? GradSum::kContiguousShards
                 : s.zero.stage == 3 && s.step == StepKind::kChunks ? GradSum::kUnitShards
                                                                     : GradSum::kTree;
  } else {
    s.step = c.parallel.pipelined() ? StepKind::kPipeline : StepKind::kReplica;
    s.grad_sum = s.zero.contiguous ? GradSum::kContiguousShards
                 : s.zero.stage >= 2 ? GradSum::kUnitShards
                                     : GradSum::kBuckets;
  }
  s.split_backward = s.pipelined() && s.schedule == ScheduleKind::kZbH1;
  s.arena_rows = s.step == StepKind::kChunks ? c.train.batch_size / s.chunks
                 : s.pipelined()             ? rows / s.microbatches
                                             : rows;
  return s;
}

std::string StepLayout::describe() const {
  const char* schedules[] = {"gpipe", "1f1b", "zb-h1"};
  std::string out = fmt::format("step: {} (", to_string(step));
  if (step == StepKind::kChunks) out += fmt::format("{} of {} rows", chunks, arena_rows);
  if (pipelined()) {
    out += fmt::format("{}, {} microbatches of {} rows", schedules[static_cast<int>(schedule)], microbatches,
                       arena_rows);
  }
  if (step == StepKind::kReplica) out += fmt::format("{} rows", arena_rows);
  out += fmt::format("), gradient by {}, ZeRO {}", to_string(grad_sum), zero.stage);
  if (recompute_full) out += ", recompute full";
  if (stored == Dtype::bf16) out += ", stored activations bf16";
  return out;
}

}  // namespace gpt2
