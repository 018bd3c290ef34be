// The step a run takes, decided once (issue 41; DESIGN.md "The RunLayout:
// settings resolved once"): from the resolved configuration, the
// data-parallel size and the replica's rows, which step function runs, how
// a replica's gradient meets the others', the canonical chunks, the
// activation arenas' rows, the schedule and the stored dtype. The run builds
// its step and reducer from it with one switch (train/run/build.cpp, build_step),
// the plan counts its memory and traffic from it (plan.cpp) and the run's log
// prints it (describe()). Neither re-derives it from the settings.
//
// Around the step, RunLayout (below) holds the rest of what a run is decided
// from: the configuration resolved, the grid and a rank's coordinates, the
// rows per replica, and every refusal the plan and the run give (the
// stage's reach, train.deterministic's, the grid's). The backend options and
// train.deterministic's canonical pieces are assembled here too
// (backend_options, deterministic_pieces). ProcessGrid makes the groups'
// communicators from the grid the layout checked.
#pragma once

#include <string>

#include "kernels/backend.h"
#include "kernels/tensor.h"
#include "parallel/process_grid.h"
#include "train/schedule/pipeline.h"
#include "train/config/run_config.h"

namespace gpt2 {

// This replica's rows of every global batch over `ranks` = dp x tp x pp;
// throws std::invalid_argument naming the key when the grid, the batch or
// parallel.microbatches does not divide (what a run and its plan refuse).
int replica_rows(const RunConfig& c, int ranks, int tp, int pp);

// How ZeRO lays a run out over `dp` data-parallel ranks: the stage in force
// (0 with one rank); contiguous shards of a padded buffer (stage 1, or 2
// under a pipeline schedule) or unit-aligned ones (parallel/zero.h); what the
// model's buffers hold.
struct ZeroSharding {
  int zero_stage = 0;
  bool contiguous = false;
  Residency residency = Residency::kWhole;
  // Stage 2 or 3 over unit-aligned shards (ZeroShards).
  bool unit_shards() const { return zero_stage >= 2 && !contiguous; }
};
ZeroSharding zero_sharding(const RunConfig& c, int dp);

// Which step function (train_step.h) a layout runs.
enum class StepKind {
  kReplica,        // one arena of the replica's rows: data_parallel_step, or sharded_step under unit shards
  kPipeline,       // a schedule's arenas, one per microbatch in flight: pipelined_step
  kChunks,         // train.deterministic: one arena of a canonical chunk, chunks in a tree: deterministic_step
  kChunkPipeline,  // train.deterministic with stages: the microbatches are the chunks: deterministic_pipelined_step
};

// How a replica's gradient meets the other replicas' (the reducer).
enum class GradSum {
  kBuckets,           // an allreduce of the whole buffer, in buckets during the backward (GradientSync)
  kContiguousShards,  // ZeRO-1 (and 2 under a schedule or the tree): reduce-scatter into contiguous shards
  kUnitShards,        // ZeRO-2/3: per-unit shards (ZeroShards)
  kTree,              // train.deterministic without ZeRO: recursive doubling of the whole gradient
};

std::string to_string(StepKind k);
std::string to_string(GradSum g);

struct StepSpec {
  StepKind step = StepKind::kReplica;
  GradSum grad_sum = GradSum::kBuckets;
  ZeroSharding zero;            // the ZeRO stage in force and its shards (run_state.h)
  int chunks = 0;               // canonical chunks of the global batch (train.deterministic); 0 otherwise
  int arena_rows = 0;           // rows of one activation arena
  int microbatches = 1;         // per replica, under a schedule
  ScheduleKind schedule = ScheduleKind::k1F1B;
  bool split_backward = false;  // zb-h1: the backward as B and W
  bool recompute_full = false;  // train.recompute full
  bool sequence_parallel = false;  // parallel.sequence_parallel with tp > 1: the arena's rows cut (TpShape::sequence)
  bool sequence_pieces = false;    // train.sequence_pieces under train.deterministic: the arenas' rows are its pieces
  // train.deterministic with cp > 1: the step's tree runs over the replicas alone (ProcessGrid::replica_comm),
  // the model having finished each chunk's gradient over the cp group (train.sequence_pieces).
  bool over_replicas = false;
  MicrobatchSum microbatch_sum = MicrobatchSum::kAccumulate;  // a schedule's microbatches: kTree under kChunkPipeline
  Dtype stored = Dtype::f32;    // the stored activations' type
  // Where a stop signal is agreed inside a step besides its end (train.stop_within_step; train/schedule/preemption.h):
  // between train.deterministic's chunks (several on a rank), a pipeline's actions (accumulation's
  // microbatches, or stages) where its schedule has no message in flight (stop_points, train/schedule/pipeline.h),
  // or before each of ZeRO-2/3's units (ZeroShards::before_unit):
  // never, in every step, or (auto, without pipeline stages) in the steps after one longer than
  // long_step_s (5 s; train/run/test_hooks.h).
  enum class StopInStep { kNever, kLongSteps, kAlways };
  StopInStep stop_in_step = StopInStep::kNever;

  bool pipelined() const { return step == StepKind::kPipeline || step == StepKind::kChunkPipeline; }
  // One arena of this step (a microbatch's under a schedule) for rows of `seq_len` positions (the steps'
  // view: context parallelism's chunk length), cut by `context` (a rank's place in its cp group).
  ArenaSpec arena(int seq_len, const ContextCut& context = {}) const {
    ArenaSpec a(arena_rows, seq_len);
    a.stored = stored;
    a.recompute = recompute_full;
    a.split_backward = split_backward;
    a.sequence_parallel = sequence_parallel;
    a.context = context;
    a.pieces = sequence_pieces;
    return a;
  }
  bool deterministic() const { return step == StepKind::kChunks || step == StepKind::kChunkPipeline; }
  // One line for the run's log: "step: pipeline (zb-h1, 4 microbatches of 2 rows), gradient by allreduce
  // in buckets, ZeRO 0".
  std::string describe() const;
};

// The layouts a stage program cannot run, refused before anything is written.
// `multi_process`: the program runs under mpiexec (mpi, mpi_cuda).
void check_program_runs(const RunConfig& c, const std::string& program, bool multi_process);
// Whether the stage program `program` runs several processes ("mpi",
// "mpi_cuda") or one ("serial", "cuda"); throws std::invalid_argument for
// another name.
bool program_is_multi_process(const std::string& program);

// parallel.sequence_parallel's reach so far: tp > 1, pre-norm tp blocks
// (under train.deterministic the MLP's width over tp at least the model's
// channels); the rows of an
// arena (`arena_rows` x train.seq_len, `c` as the steps see it: step_config,
// whose rows are context parallelism's chunks) divisible by tp. Throws
// std::invalid_argument naming the constraint; nothing without the key.
void check_sequence_parallel(const RunConfig& c, int arena_rows);

// parallel.cp's reach so far: the mpi stage, fp32, tp blocks, without
// train.deterministic. Throws std::invalid_argument
// naming the constraint; nothing with cp 1.
void check_context_parallel(const RunConfig& c, const std::string& program);

// `c` as a run's steps and arenas see it: with parallel.cp > 1 each row of
// the batch is 2 cp chunks of train.seq_len / (2 cp) tokens, and a step's
// rows are chunks (train.batch_size x 2 cp of them over dp x cp replicas,
// model/context_parallel.h); `c` itself with cp 1.
RunConfig step_config(const RunConfig& c);

// train.deterministic's canonical chunks of the global batch: 4 when
// train.batch_size is a multiple of 4, else 2 when even, else 1; a function
// of the configuration, never of the layout (docs/determinism.md).
int canonical_chunks(const RunConfig& c);

// train.deterministic's reach so far (docs/determinism.md): the CPU stages;
// data-parallel replicas a power of two dividing the canonical chunks;
// tensor parallelism in fp32, over pre-norm tp blocks and a whole
// vocabulary, with tp dividing the canonical pieces; a pipeline whose
// microbatches are the replica's chunks; ZeRO at any stage. Throws
// std::invalid_argument naming the constraint and what is allowed for
// anything else; nothing without it.
void check_deterministic(const RunConfig& c, int ranks, const std::string& program);

// The type `program` stores the activations only a product reads in: bf16 with
// train.precision bf16 on the CPU stages; f32 on the CUDA stages, whose bf16
// is the products' alone (their arena is device memory).
Dtype stored_dtype_on(const RunConfig& c, const std::string& program);

// What a run asks of its backend, assembled once from the configuration (the
// run and generation make their backends from it): `threads` CPU threads,
// train.tf32, the GPU `device_hint`, bf16 products, and under
// train.deterministic the canonical column tile of `model`.
BackendOptions backend_options(const RunConfig& c, const Gpt2Config& model, int threads, int device_hint);

// The canonical pieces of the dimensions tensor parallelism cuts under
// train.deterministic (model/tensor_parallel.h), where the backend `be` has
// the canonical-piece products (Backend::tree_products: the deterministic
// fp32 CPU backend) and `tp` divides them; 0 (none: the default order)
// otherwise. Training refuses the other deterministic cases before it gets
// here (check_deterministic); generation from their checkpoints runs the
// default order.
int deterministic_pieces(const Gpt2Config& model, int tp, Backend& be);

// How a run saves its training checkpoints, decided once (train.save_checkpoint,
// checkpoint_format, async_checkpoint, checkpoint_every, keep_checkpoints):
// the run's writer is made from it (train/run/checkpoint_writer.h).
struct CheckpointSink {
  bool save = true;                                // false: none (benchmarks)
  CheckpointFormat format = CheckpointFormat::kFile;
  bool async = false;                              // sharded: written from a background thread
  int64_t every = 0;                               // after every N steps; 0: at the end only
  int keep = 1;                                    // complete step folders kept
  bool periodic(int64_t steps_done) const { return every > 0 && steps_done % every == 0; }
};

// A step's global batch as the step functions and arenas see it: with
// parallel.cp > 1 each row is 2 cp chunks of seq_len / (2 cp) tokens, so
// batch_size x 2 cp rows of that length (model/context_parallel.h); the
// configuration's train.batch_size and train.seq_len otherwise.
struct StepShape {
  int batch_size = 0;
  int seq_len = 0;
};

// The run's layout, decided once from the configuration as given, the rank
// count and the stage program, before anything is read or allocated:
// every refusal a run of these would give (the configuration's checks, the
// stage's reach, train.deterministic's, the grid and the rows per
// replica), then the grid, the rows and the step. The plan (make_plan)
// formats it per rank, the run (run_train) builds from it, and the run's
// log prints describe().
struct RunLayout {
  RunConfig config;  // as given, checked
  std::string program;  // the stage program: "serial", "mpi", "cuda" or "mpi_cuda"
  int ranks = 1, dp = 1, tp = 1, pp = 1, cp = 1;
  int rows = 0;  // of the global batch, per data-parallel replica (what its loader reads)
  StepShape shape;  // a step's rows and their length as the step, its arenas and the plan's counts see them
  StepSpec step;
  CheckpointSink checkpoints;  // how the run saves
  // What the run asks of its backend (backend_options: its train.gemm_choices
  // file read here, once), less what each process sets (backend_for).
  BackendOptions backend;
  StageSplit stage_split;  // the (virtual) stages' layers and ranks (parallel.stage_layers, virtual_stages: train/schedule/stage_split.h)

  GridCoords at(int rank) const { return grid_coords(rank, tp, pp, cp); }
  // The backend's options on one process: its CPU threads and its GPU.
  BackendOptions backend_for(int threads, int device_hint) const {
    BackendOptions o = backend;
    o.threads = threads;
    o.device_hint = device_hint;
    return o;
  }
  // A step's rows on one rank: the replica's rows, or (cp > 1) their head and tail chunks.
  int step_rows() const { return cp > 1 ? 2 * rows : rows; }
  // "grid: 4 ranks = dp 2 x tp 2 x pp 1, 8 rows per replica".
  std::string describe() const;
  // The lines the run's log gives the layout: tensor parallelism, describe()
  // and the step's, the deterministic order, the pipeline, ZeRO, and the
  // settings that do nothing here or were read as an alias. `facts`: the
  // sizes the made model gives them.
  std::vector<std::string> notes(const struct LayoutFacts& facts) const;
};

// What a rank's layout came to once its model was made: the sizes the log's
// notes name (RunLayout::notes).
struct LayoutFacts {
  Gpt2Config model;           // resolved (a resumed run's is its checkpoint's)
  size_t params = 0;          // the rank's model's parameters (its tp shard of its stage)
  size_t shard_params = 0;    // ZeRO: the parameters this rank updates
  size_t shard_units = 0;     // ZeRO-2/3: the units its shards are cut by
  std::string tp_blocks;      // TpPlace::describe()
  bool tp_private = false;    // spd or parallel blocks
  int tp_pieces = 0;          // train.deterministic's canonical pieces (TpPlace::pieces)
};
RunLayout resolve_run(const RunConfig& given, int ranks, const std::string& program);

// Where a run's state comes from, decided once (issue 69): from train.seed;
// from a model file whose weights only are taken (train.init_from, or
// evaluate's --model); or from a training checkpoint (--resume, `auto`
// already made a path or nothing by the run folder's claim). The run's state
// is built from it (train/run/run_state.h init_or_resume) without asking
// the settings again.
struct StateSource {
  enum class Kind { kSeed, kModelFile, kCheckpoint };
  Kind kind = Kind::kSeed;
  std::string path;  // the model file or the checkpoint
  std::string key;   // the option that named it, for errors: "train.init_from", "--model", "--resume"
};
// --resume's checkpoint when given (train.init_from is then ignored), else
// train.init_from's file, else the seed.
StateSource resolve_source(const RunConfig& c, const std::string& resume);

// parallel.stage_layers' counts (train/schedule/stage_split.h) of a valid
// `c`, with their refusals and a private block run (spd, parallel) crossing
// a stage boundary's: what a configuration's checks end with (with `auto`,
// the split's cost model). resolve_run computes them once.
std::vector<int> checked_stage_counts(const RunConfig& c);
// validate(c), then checked_stage_counts: the configuration's checks where no
// run is resolved (the config, generate, init and evaluate commands).
void validate_with_split(const RunConfig& c);
// resolve_run after its first checks: `c` validated and `counts` its checked
// stage counts (run_train checks its request's hostfile and flags between).
RunLayout resolve_validated(const RunConfig& c, std::vector<int> counts, int ranks, const std::string& program);

// `c` valid for `dp` replicas of `rows`
// rows each; `stored`: the stored activations' type on this stage
// (stored_dtype_on, or what the backend accepts).
StepSpec resolve_step(const RunConfig& c, int dp, int rows, Dtype stored);

}  // namespace gpt2
