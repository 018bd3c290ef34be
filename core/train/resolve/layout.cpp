// The step a run takes, decided once (see layout.h).
#include "train/resolve/layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>

#include "model/params.h"
#include "model/tensor_parallel.h"
#include "parallel/process_grid.h"
#include "train/resolve/stage_keys.h"
#include "train/schedule/stage_split.h"

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

int replica_rows(const RunConfig& c, int ranks, int tp, int pp) {
  const int cp = c.parallel.cp;
  check_grid(ranks, tp, pp, cp);
  const int dp = ranks / (tp * pp * cp);
  if (c.train.batch_size % dp != 0) {
    throw std::invalid_argument(
        tp * pp * cp == 1
            ? fmt::format("train.batch_size {} is not divisible by the {} ranks", c.train.batch_size, dp)
            : fmt::format("train.batch_size {} is not divisible by the {} data-parallel replicas ({} ranks / "
                          "(parallel.tp {} x parallel.pp {}{}))", c.train.batch_size, dp, ranks, tp, pp,
                          cp > 1 ? fmt::format(" x parallel.cp {}", cp) : ""));
  }
  const int rows = c.train.batch_size / dp;
  if (rows % c.parallel.microbatches != 0) {
    throw std::invalid_argument(fmt::format(
        "parallel.microbatches {} does not divide the {} rows of each data-parallel replica (train.batch_size {} / "
        "{} replicas)", c.parallel.microbatches, rows, c.train.batch_size, dp));
  }
  return rows;
}

ZeroSharding zero_sharding(const RunConfig& c, int dp) {
  ZeroSharding z;
  z.zero_stage = dp > 1 ? c.parallel.zero_stage() : 0;
  // ZeRO-2 keeps the whole gradient where the step needs it: a pipeline schedule
  // accumulates it over microbatches, and train.deterministic's tree over chunks.
  z.contiguous = z.zero_stage == 1 || (z.zero_stage == 2 && (c.parallel.pipelined() || c.train.deterministic));
  z.residency = z.contiguous || z.zero_stage < 2 ? Residency::kWhole
                : z.zero_stage == 2              ? Residency::kParams
                                                 : Residency::kNone;
  return z;
}

int canonical_chunks(const RunConfig& c) {
  const int B = c.train.batch_size;
  return B % 4 == 0 ? 4 : B % 2 == 0 ? 2 : 1;
}

void check_deterministic(const RunConfig& c, int ranks, const std::string& program) {
  if (!c.train.deterministic) return;
  const auto refuse = [](const std::string& why) {
    throw std::invalid_argument("train.deterministic true: " + why + " (docs/determinism.md)");
  };
  if (program == "cuda" || program == "mpi_cuda")
    refuse(fmt::format("runs on the CPU stages only so far, not {}", program));
  if (c.parallel.tp > 1) {  // the canonical pieces of the dimensions it cuts (model/tensor_parallel.h)
    const int q = canonical_pieces(c.model);
    if (q % c.parallel.tp != 0) {
      refuse(fmt::format("parallel.tp {} does not divide the {} canonical pieces of this model's heads and MLP width "
                         "(n_head {}, key/value heads {}, hidden {}); use parallel.tp {}", c.parallel.tp, q, c.model.NH,
                         c.model.kv_heads(), c.model.mlp_width(), q == 4 ? "1, 2 or 4" : q == 2 ? "1 or 2" : "1"));
    }
    const std::vector<BlockType> blocks = c.parallel.blocks();
    const bool all_tp = std::all_of(blocks.begin(), blocks.end(), [](BlockType t) { return t == BlockType::kTp; });
    if (c.model.post_norm() || !all_tp || c.parallel.vocab_parallel) {
      refuse(fmt::format("runs tensor parallelism with pre-norm tp blocks and a whole vocabulary so far, not {}; use "
                         "model.norm_position pre, parallel.block_types tp and parallel.vocab_parallel false",
                         c.model.post_norm() ? "post-norm blocks" : !all_tp ? "spd or parallel blocks"
                                                                          : "parallel.vocab_parallel"));
    }
  }
  const int S = c.train.sequence_pieces, cp = c.parallel.cp;
  if (cp > 1 && S % (2 * cp) != 0) {
    refuse(fmt::format("parallel.cp {} needs train.sequence_pieces a multiple of 2 cp = {}, not {}: each rank's two "
                       "chunks must be whole pairs of the canonical pieces, so that its sums are a subtree of the "
                       "pair tree (serial gives the same bits with the same setting)", cp, 2 * cp, S));
  }
  if (S > 1) {  // what the pair trees are built for so far (kernels/sequence_pieces.h)
    const std::string not_with =
        c.train.bf16()                    ? fmt::format("train.precision {}", to_string(c.train.precision))
        : c.parallel.pp > 1               ? fmt::format("pipeline stages (parallel.pp {})", c.parallel.pp)
        : c.parallel.sequence_parallel    ? std::string("parallel.sequence_parallel")
        : c.parallel.zero_stage() > 0     ? fmt::format("parallel.zero {}", c.parallel.zero_stage())
        : c.parallel.vocab_parallel       ? std::string("parallel.vocab_parallel")
                                          : std::string();
    if (!not_with.empty()) {
      refuse(fmt::format("train.sequence_pieces {} runs fp32 products on whole stages of one arena, without ZeRO, "
                         "sequence parallelism or a vocabulary cut so far, not with {}; use train.sequence_pieces 1 "
                         "(and parallel.cp 1)", S, not_with));
    }
  }
  const int K = canonical_chunks(c), chunk = c.train.batch_size / K;
  // data-parallel ranks (the layout checks the grid)
  const int dp = std::max(1, ranks / (c.parallel.pp * c.parallel.tp * c.parallel.cp));
  if (dp < 1 || (dp & (dp - 1)) != 0 || K % dp != 0) {
    refuse(fmt::format("{} data-parallel ranks do not hold whole subtrees of the {} canonical chunks of "
                       "train.batch_size {}; use {}", dp, K, c.train.batch_size,
                       K == 4 ? "1, 2 or 4 ranks" : K == 2 ? "1 or 2 ranks" : "1 rank"));
  }
  if (c.train.bf16() && c.parallel.tp > 1) {
    refuse(fmt::format("runs tensor parallelism in fp32 so far, not {} (its pieces' products are OpenBLAS's); use "
                       "train.precision fp32 or parallel.tp 1", to_string(c.train.precision)));
  }
  if (c.parallel.pp > 1) {  // the microbatches are the replica's chunks (DeterministicPipelinedStep)
    if (c.parallel.microbatches * dp != K) {
      refuse(fmt::format("a pipeline's microbatches are its canonical chunks ({} of train.batch_size {} over {} "
                         "data-parallel replica{}), not {}; use parallel.microbatches {}", K, c.train.batch_size, dp,
                         dp == 1 ? "" : "s", c.parallel.microbatches, K / dp));
    }
    return;
  }
  // Accumulation (parallel.microbatches on one stage): a rank runs its rows chunk by
  // chunk anyway, so a micro-step of whole chunks is the same.
  const int rows = c.train.batch_size / dp;
  const int mbs = std::max(1, c.parallel.microbatches);
  if (rows % mbs != 0) return;  // the layout's own check names this (replica_rows)
  const int micro = rows / mbs;
  if (micro <= 0 || micro % chunk != 0) {
    refuse(fmt::format("a micro-step of {} rows is not a whole number of the {}-row canonical chunks; use "
                       "parallel.microbatches dividing {} (the replica's chunks)", micro, chunk, rows / chunk));
  }
}

Dtype stored_dtype_on(const RunConfig& c, const std::string& program) {
  return program == "cuda" || program == "mpi_cuda" ? Dtype::f32 : c.train.stored_dtype();
}

bool program_is_multi_process(const std::string& program) {
  if (program == "serial" || program == "cuda") return false;
  if (program == "mpi" || program == "mpi_cuda") return true;
  throw std::invalid_argument(
      fmt::format("--stage: unknown stage '{}' (expected serial, mpi, cuda or mpi_cuda)", program));
}

void check_program_runs(const RunConfig& c, const std::string& program, bool multi_process) {
  if (!multi_process && c.parallel.tp > 1) {
    throw std::invalid_argument(fmt::format(
        "parallel.tp {}: the {} stage runs one process; tensor parallelism runs on the mpi and mpi_cuda stages "
        "(mpiexec -n <dp x tp>)",
        c.parallel.tp, program));
  }
  if (!multi_process && c.parallel.pp > 1) {
    throw std::invalid_argument(fmt::format(
        "parallel.pp {}: the {} stage runs one process; pipeline stages run on the mpi stage (mpiexec -n <dp x tp x "
        "pp>)",
        c.parallel.pp, program));
  }
  if (c.parallel.pp > 1 && program != "mpi") {
    throw std::invalid_argument(fmt::format(
        "parallel.pp {}: pipeline stages run on the mpi stage only for now (the {} stage's communicator has no "
        "non-blocking send)",
        c.parallel.pp, program));
  }
  if (c.parallel.zero_stage() >= 2 && multi_process && program != "mpi") {
    throw std::invalid_argument(fmt::format(
        "parallel.zero {}: ZeRO-2 and ZeRO-3 run on the mpi stage only for now (their working slots are host "
        "memory); use parallel.zero 1 on {}",
        c.parallel.zero_stage(), program));
  }
}

void check_sequence_parallel(const RunConfig& c, int arena_rows) {
  const ParallelConfig& p = c.parallel;
  if (!p.sequence_parallel) return;
  auto refuse = [](const std::string& why) {
    throw std::invalid_argument("parallel.sequence_parallel: " + why);
  };
  if (p.tp < 2) refuse(fmt::format("cuts the residual stream over the tensor-parallel group; parallel.tp is {}", p.tp));
  const std::vector<BlockType> blocks = p.blocks();
  if (c.model.post_norm() || std::any_of(blocks.begin(), blocks.end(), [](BlockType b) { return b != BlockType::kTp; })) {
    refuse("built for model.norm_position pre and parallel.block_types tp (spd and parallel blocks keep private "
           "streams)");
  }
  if (c.train.deterministic && c.model.resolved().fc_width() / p.tp < c.model.C) {
    refuse(fmt::format("under train.deterministic a norm's whole-row backward borrows the MLP's gradient buffer, "
                       "which holds fc width / tp = {} of the model's {} channels: use a smaller parallel.tp",
                       c.model.resolved().fc_width() / p.tp, c.model.C));
  }
  const int64_t rows = int64_t{arena_rows} * c.train.seq_len;
  if (rows % p.tp != 0) {
    refuse(fmt::format("the {} rows of a replica's batch ({} x {} {}) do not divide over parallel.tp {}", rows,
                       arena_rows, p.cp > 1 ? "the context-parallel chunk of" : "train.seq_len", c.train.seq_len,
                       p.tp));
  }
}

void check_context_parallel(const RunConfig& c, const std::string& program) {
  const ParallelConfig& p = c.parallel;
  if (p.cp == 1) return;
  const auto refuse = [&](const std::string& why) {
    throw std::invalid_argument(fmt::format("parallel.cp {}: {} (docs/context_parallel.md)", p.cp, why));
  };
  if (program != "mpi")
    refuse(fmt::format("runs on the mpi stage (its ring attention is the CPU backends'), not {}", program));
  const std::vector<BlockType> blocks = p.blocks();
  if (std::any_of(blocks.begin(), blocks.end(), [](BlockType b) { return b != BlockType::kTp; })) {
    refuse("built for parallel.block_types tp (spd and parallel blocks keep private streams)");
  }
}

RunConfig step_config(const RunConfig& c) {
  if (c.parallel.cp == 1) return c;
  RunConfig s = c;
  s.train.seq_len = c.train.seq_len / (2 * c.parallel.cp);
  s.train.batch_size = c.train.batch_size * 2 * c.parallel.cp;
  return s;
}

BackendOptions backend_options(const RunConfig& c, const Gpt2Config& model, int threads, int device_hint) {
  BackendOptions o = BackendOptions::with_threads(threads)
                         .with_bf16(c.train.bf16())
                         .with_deterministic(c.train.deterministic)
                         .with_gemm(c.train.gemm);
  o.tf32 = c.train.tf32;
  o.device_hint = device_hint;
  o.column_tile = c.train.deterministic ? canonical_column_tile(model) : 0;
  if (!c.train.gemm_choices.empty()) o.gemm_pins = read_gemm_choices(c.train.gemm_choices);
  if (c.train.deterministic && c.train.sequence_pieces > 1) {  // the pair trees (kernels/sequence_pieces.h)
    o.pieces = SequencePieces::shared_rows(c.train.sequence_pieces, c.train.seq_len, c.parallel.cp);  // cp 1: whole
  }
  return o;
}

int deterministic_pieces(const Gpt2Config& model, int tp, Backend& be) {
  if (be.tree_products() == nullptr) return 0;
  const int q = canonical_pieces(model);
  return q % tp == 0 ? q : 0;
}

StepSpec resolve_step(const RunConfig& c, int dp, int rows, Dtype stored) {
  StepSpec s;
  s.zero = zero_sharding(c, dp);
  s.stored = stored;
  s.recompute_full = c.train.recompute_full();
  s.microbatches = c.parallel.microbatches;
  s.schedule = c.parallel.schedule;
  if (c.train.deterministic) {
    // The chunks, and a pipeline only with stages: microbatches without stages are the chunks themselves.
    s.chunks = canonical_chunks(c);
    s.over_replicas = c.parallel.cp > 1;
    s.step = c.parallel.pp > 1 ? StepKind::kChunkPipeline : StepKind::kChunks;
    s.grad_sum = s.zero.contiguous                                       ? GradSum::kContiguousShards
                 : s.zero.zero_stage == 3 && s.step == StepKind::kChunks ? GradSum::kUnitShards
                                                                         : GradSum::kTree;
  } else {
    s.step = c.parallel.pipelined() ? StepKind::kPipeline : StepKind::kReplica;
    s.grad_sum = s.zero.contiguous        ? GradSum::kContiguousShards
                 : s.zero.zero_stage >= 2 ? GradSum::kUnitShards
                                          : GradSum::kBuckets;
  }
  s.split_backward = s.pipelined() && splits_backward(s.schedule);
  s.sequence_parallel = c.parallel.sequence_parallel && c.parallel.tp > 1;
  s.sequence_pieces = c.train.deterministic && c.train.sequence_pieces > 1;  // as backend_options' SequencePieces
  s.microbatch_sum = s.step == StepKind::kChunkPipeline ? MicrobatchSum::kTree : MicrobatchSum::kAccumulate;
  s.arena_rows = s.step == StepKind::kChunks ? c.train.batch_size / s.chunks
                 : s.pipelined()             ? rows / s.microbatches
                                             : rows;
  // Stop points inside the step: between chunks, a pipeline's actions, or (ZeRO-2/3's unit shards, every rank
  // acquiring the same units in the same order) before each unit.
  const bool stop_points = (s.step == StepKind::kChunks && s.chunks / dp > 1) || s.pipelined() ||
                           (s.grad_sum == GradSum::kUnitShards && c.parallel.pp == 1);
  switch (stop_points ? c.train.stop_within_step : StopWithin::kNever) {
    case StopWithin::kNever:
      s.stop_in_step = StepSpec::StopInStep::kNever;
      break;
    case StopWithin::kAlways:
      s.stop_in_step = StepSpec::StopInStep::kAlways;
      break;
    case StopWithin::kAuto:  // pipeline stages would wait for each other at every stop point
      s.stop_in_step = c.parallel.pp > 1 ? StepSpec::StopInStep::kNever : StepSpec::StopInStep::kLongSteps;
      break;
  }
  return s;
}

std::string StepSpec::describe() const {
  std::string out = fmt::format("step: {} (", to_string(step));
  if (step == StepKind::kChunks) out += fmt::format("{} of {} rows", chunks, arena_rows);
  if (pipelined()) {
    out += fmt::format("{}, {} microbatches of {} rows", to_string(schedule), microbatches,
                       arena_rows);
  }
  if (step == StepKind::kReplica) out += fmt::format("{} rows", arena_rows);
  out += fmt::format("), gradient by {}, ZeRO {}", to_string(grad_sum), zero.zero_stage);
  if (recompute_full) out += ", recompute full";
  if (stored == Dtype::bf16) out += ", stored activations bf16";
  if (stop_in_step == StopInStep::kAlways) out += ", a stop signal taken between micro-steps";
  if (stop_in_step == StopInStep::kLongSteps) out += ", a stop signal taken between the micro-steps of long steps";
  return out;
}

StateSource resolve_source(const RunConfig& c, const std::string& resume) {
  if (!resume.empty()) return {StateSource::Kind::kCheckpoint, resume, "--resume"};
  if (!c.train.init_from.empty()) return {StateSource::Kind::kModelFile, c.train.init_from, "train.init_from"};
  return {};
}

std::vector<int> checked_stage_counts(const RunConfig& c) {
  std::vector<int> counts = stage_layer_counts(c);  // parallel.stage_layers (no more stages than layers)
  const TpPlace tp{c.parallel.tp, 0, c.parallel.blocks(), nullptr};
  for (int s = 0; s + 1 < static_cast<int>(counts.size()); ++s) {  // a private run may not cross a stage boundary
    const int last = StageLayers::at(counts, s).last - 1;
    if (tp.is_private(last) && !tp.ends_run(last)) {
      throw std::invalid_argument(fmt::format(
          "parallel.block_types: the private run holding layers {} and {} crosses the boundary between pipeline "
          "stages {} and {} (parallel.stage_layers: {}); end the run at layer {}, or choose another parallel.pp or "
          "parallel.stage_layers", last, last + 1, s, s + 1, fmt::join(counts, ","), last));
    }
  }
  return counts;
}

void validate_with_split(const RunConfig& c) {
  validate(c);
  (void)checked_stage_counts(c);
}

RunLayout resolve_validated(const RunConfig& c, std::vector<int> counts, int ranks, const std::string& program) {
  RunLayout r;
  r.config = c;
  const bool multi = program_is_multi_process(program);
  if (!multi && ranks > 1) {
    throw std::invalid_argument(fmt::format(
        "{} ranks: the {} stage runs one process (the mpi and mpi_cuda stages run several)", ranks, program));
  }
  check_program_runs(c, program, multi);
  check_context_parallel(c, program);
  check_deterministic(c, ranks, program);
  r.program = program;
  r.ranks = ranks;
  r.tp = c.parallel.tp;
  r.pp = c.parallel.pp;
  r.cp = c.parallel.cp;
  r.rows = replica_rows(c, ranks, r.tp, r.pp);  // checks the grid first
  r.dp = ranks / (r.tp * r.pp * r.cp);
  const RunConfig steps = step_config(c);  // the step's view, read here to decide it; kept as its shape
  r.shape = {steps.train.batch_size, steps.train.seq_len};
  r.stage_split = stage_split(c, std::move(counts));  // the counts checked once; their placement and pass times
  r.checkpoints = {c.train.save_checkpoint, c.train.checkpoint_format, c.train.async_checkpoint,
                   c.train.checkpoint_every, c.train.keep_checkpoints};
  r.step = resolve_step(steps, r.dp * r.cp, r.step_rows(), stored_dtype_on(c, program));
  r.backend = backend_options(c, c.model, 1, 0);  // the column tile reads no vocabulary size
  if (r.step.step == StepKind::kChunks && r.cp > 1) {
    // The batch's canonical chunks, not the cut rows': a chunk of batch_size / K rows is 2 arena rows each
    // (its head and tail chunks) on every cp rank (train.sequence_pieces).
    r.step.chunks = canonical_chunks(c);
    r.step.arena_rows = 2 * c.train.batch_size / r.step.chunks;
  }
  check_sequence_parallel(steps, r.step.arena_rows);  // the arena's rows as the steps cut them
  return r;
}

RunLayout resolve_run(const RunConfig& given, int ranks, const std::string& program) {
  if (ranks < 1) throw std::invalid_argument(fmt::format("--ranks: must be >= 1, got {}", ranks));
  validate(given);
  std::vector<int> counts = checked_stage_counts(given);  // with auto, the split's cost model runs here alone
  return resolve_validated(given, std::move(counts), ranks, program);
}

std::string RunLayout::describe() const {
  if (cp > 1) {
    return fmt::format("grid: {} ranks = dp {} x tp {} x cp {} x pp {}, {} rows per replica, each rank holding 2 of "
                       "their {} chunks of {} tokens", ranks, dp, tp, cp, pp, rows, 2 * cp, shape.seq_len);
  }
  return fmt::format("grid: {} rank{} = dp {} x tp {} x pp {}, {} rows per replica", ranks, ranks == 1 ? "" : "s", dp,
                     tp, pp, rows);
}

namespace {

// Tensor parallelism: the groups, the blocks and any vocabulary cut.
std::string tp_note(const RunLayout& l, const LayoutFacts& f) {
  const TpShape shape{l.tp, l.config.parallel.vocab_parallel};
  return fmt::format("layout: data parallel {} x tensor parallel {} (groups of consecutive ranks); blocks {}{}{}", l.dp,
                     l.tp, f.tp_blocks,
                     f.tp_private ? " (spd/parallel blocks: another function than the standard model)" : "",
                     shape.vocab ? fmt::format("; embedding, head and loss sharded by vocabulary rows ({} "
                                               "of {} a rank)", shape.vocab_rows(f.model.V), f.model.V)
                                 : "");
}

// Context parallelism: which chunks a rank holds, and how attention and the gradient cross the group.
std::string cp_note(const RunLayout& l) {
  const RunConfig& c = l.config;
  const int dp = l.dp, cp = l.cp;
  return fmt::format("context parallel: groups of {} ranks; rank r holds chunks r and {} - r of every row "
                     "(train.seq_len {} in {} chunks of {}); {}", cp, 2 * cp - 1, c.train.seq_len, 2 * cp,
                     l.shape.seq_len,
                     l.step.deterministic()
                         ? fmt::format("attention over every rank's keys and values, all-gathered; each "
                                       "chunk's gradient finished over the cp group, then the {} replicas' "
                                       "tree (train.sequence_pieces)", dp)
                         : fmt::format("attention by a ring of key/value blocks; the gradient summed over "
                                       "dp x cp = {} ranks", dp * cp));
}

// train.deterministic's order: the canonical chunks, and the sequence pieces where there are any.
void add_deterministic_notes(const RunLayout& l, const LayoutFacts& f, std::vector<std::string>& out) {
  const RunConfig& c = l.config;
  const StepSpec& sl = l.step;
  out.push_back(fmt::format("deterministic: {} canonical chunks of {} rows, each run alone and added in one tree{} "
                            "(docs/determinism.md)", sl.chunks, c.train.batch_size / sl.chunks,
                            l.tp > 1 ? fmt::format("; {} canonical pieces of the dimensions tensor parallelism cuts",
                                                   f.tp_pieces)
                                     : ""));
  const int S = c.train.sequence_pieces;
  if (S > 1) {
    out.push_back(fmt::format("sequence pieces: each row of {} tokens in {} pieces of {}, every sum over tokens a "
                              "tree over their {} pairs{}", c.train.seq_len, S, c.train.seq_len / S, S / 2,
                              l.cp > 1 ? fmt::format(", {} on each context-parallel rank, finished over the group; the "
                                                     "attention over every rank's keys and values, all-gathered",
                                                     S / (2 * l.cp))
                                       : ""));
  }
}

// "0[0, 6), 1[6, 12)": each stage's layers, its further chunks after a "+".
std::string stage_layers_text(const StageSplit& split, int pp) {
  std::string stages;
  for (int s = 0; s < pp; ++s) {
    const StageLayers l = split.held(s);
    stages += fmt::format("{}{}[{}, {})", s ? ", " : "", s, l.first, l.last);
    for (const LayerSpan& more : l.more) stages += fmt::format("+[{}, {})", more.first, more.last);
  }
  return stages;
}

// The pipeline: its stages and their layers, how balanced the split is, its microbatches and schedule; under
// zb-v the pass times the lists were built for.
void add_pipeline_notes(const RunLayout& l, const LayoutFacts& f, std::vector<std::string>& out) {
  const RunConfig& c = l.config;
  const StepSpec& sl = l.step;
  const StageSplit& stage_split = l.stage_split;
  const std::string stages = stage_layers_text(stage_split, l.pp);
  // Each stage's counted cost (train/schedule/stage_split.h), relative to the costliest: how balanced the split is.
  const std::vector<double> costs = stage_split_costs(stage_split.counts, stage_costs(f.model, sl.arena_rows,
                                                                                      l.shape.seq_len));
  const double top = *std::max_element(costs.begin(), costs.end());
  std::string shares;
  for (double k : costs) shares += fmt::format("{}{:.2f}", shares.empty() ? "" : ", ", k / top);
  const int v = stage_split.chunks();
  out.push_back(fmt::format("pipeline: {} stages{} (layers {}{}; counted cost against the costliest {}), {} "
                            "microbatches of {} rows, schedule {}", l.pp,
                            v > 1 ? fmt::format(" of {} chunks{}", v, stage_split.v_shape ? " in the V shape" : "")
                                  : "",
                            stages,
                            c.parallel.stage_layers.empty() ? "" : ", parallel.stage_layers", shares,
                            sl.microbatches, sl.arena_rows, to_string(sl.schedule)));
  if (stage_split.v_shape) {
    const PassTimes& t = stage_split.passes;
    out.push_back(fmt::format("zb-v: the lists built for a chunk's F : B : W = {:.2f} : {:.2f} : {:.2f} ({})",
                              t.forward, t.input, t.weight,
                              c.parallel.pass_times.empty() ? "counted by the op table" : "parallel.pass_times"));
  }
}

// ZeRO: what is sharded over how many ranks, or that parallel.zero has nothing to shard over.
void add_zero_note(const RunLayout& l, const LayoutFacts& f, std::vector<std::string>& out) {
  const RunConfig& c = l.config;
  const StepSpec& sl = l.step;
  const int zero = sl.zero.zero_stage;
  if (sl.grad_sum == GradSum::kContiguousShards) {
    out.push_back(fmt::format("ZeRO-{}: Adam moments sharded over {} data-parallel ranks ({} of {} parameters here){}",
                              zero, l.dp, f.shard_params, f.params,
                              zero != 2            ? ""
                              : sl.deterministic() ? "; the deterministic tree adds whole gradients over its chunks, "
                                                     "so stage 2 keeps stage 1's memory"
                                                   : "; the pipeline schedule accumulates the stage's whole gradient "
                                                     "over its microbatches, so stage 2 keeps stage 1's memory"));
  } else if (sl.grad_sum == GradSum::kUnitShards) {
    out.push_back(fmt::format("ZeRO-{}: {} sharded over {} data-parallel ranks ({} of {} parameters here, in {} units)",
                              zero, zero == 2 ? "moments and gradients" : "moments, gradients and parameters", l.dp,
                              f.shard_params, f.params, f.shard_units));
  } else if (c.parallel.zero_stage() > 0) {
    out.push_back(fmt::format("parallel.zero {} does nothing with one data-parallel rank: nothing to shard over",
                              c.parallel.zero_stage()));
  }
}

}  // namespace

std::vector<std::string> RunLayout::notes(const LayoutFacts& f) const {
  const RunConfig& c = config;
  std::vector<std::string> out;
  if (tp > 1) out.push_back(tp_note(*this, f));
  out.push_back(describe());
  if (cp > 1) out.push_back(cp_note(*this));
  out.push_back(step.describe());
  if (step.deterministic()) add_deterministic_notes(*this, f, out);
  if (step.pipelined()) add_pipeline_notes(*this, f, out);
  add_zero_note(*this, f, out);
  if (c.parallel.vocab_parallel && tp == 1) {
    out.push_back("parallel.vocab_parallel does nothing with parallel.tp 1: the embedding and head stay whole");
  }
  return out;
}

}  // namespace gpt2
