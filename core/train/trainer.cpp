#include "train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <type_traits>

#include "parallel/gradient_sync.h"
#include "parallel/hostfile.h"
#include "parallel/process_grid.h"
#include "model/activations.h"
#include "model/flops.h"
#include "model/generate.h"
#include "train/checkpoint.h"
#include "train/checkpoint_store.h"
#include "train/checkpoint_writer.h"
#include "train/corpus.h"
#include "train/mfu_peak.h"
#include "train/model_source.h"
#include "train/multiple_choice.h"
#include "train/layout.h"
#include "train/pipeline.h"
#include "train/plan.h"
#include "train/preemption.h"
#include "train/run_logger.h"
#include "train/run_state.h"
#include "train/train_step.h"
#include "util/console.h"
#include "util/fields.h"
#include "util/files.h"
#include "util/hash.h"
#include "util/provenance.h"

namespace gpt2 {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The MFU denominator: the configured peak, or the matrix-product ceiling of
// all the job's backends, measured by rank 0 while the others wait idle (on
// one machine; give train.peak_gflops for several) and raised to the best
// ever measured here for this layout (train/mfu_peak.h), so that a busy
// start-up does not lower it.
MfuPeak mfu_peak(const RunConfig& c, const StageContext& ctx, RunState& st, Communicator& comm, int threads) {
  MfuPeak peak{c.train.peak_gflops, "train.peak_gflops"};
  if (peak.gflops <= 0) {
    if (comm.rank() == 0) {
      const double measured = ctx.backend.ceiling_gflops(*st.backend, comm.size(), comm.local_size(), threads);
      const MachineInfo m = machine_info();
      std::string key =
          fmt::format("{}|{}|{}|{}x{}", m.hostname, m.cpu_model, st.backend->name(), comm.size(), threads);
      for (const auto& [k, v] : kernel_library_info()) key += "|" + v;
      // A bf16 run's ceiling is its bf16 products' (cpu_backend_kind measures those).
      peak = best_known_peak(key, measured,
                             st.backend->products() == Dtype::bf16 ? "bf16 product" : "fp32 product (OpenBLAS or oneDNN)");
    }
    comm.broadcast(&peak.gflops, sizeof peak.gflops, 0);
  }
  return peak;
}

// The summary's provenance: build and machine, the kernel libraries, and how this run was laid out.
Json run_provenance(const TrainRequest& req, const StageContext& ctx, const RunState& st, Communicator& comm,
                    int threads, const MfuPeak& peak, const std::string& run_id) {
  const RunConfig& c = req.config;
  Json p = provenance_json(machine_info(), build_info());
  for (const auto& [k, v] : kernel_library_info()) p[k] = v;
  p["stage"] = ctx.stage;
  p["backend"] = st.backend->name();
  p["communicator"] = comm.name();
  for (const auto& [k, v] : st.backend->library_versions()) p[k] = v;
  for (const auto& [k, v] : comm.library_versions()) p[k] = v;
  if (const auto choices = st.backend->product_choices(); !choices.empty()) {
    // train.gemm auto's per-shape libraries (rank 0's): train.gemm_choices pins them in a rerun.
    Json g = Json::object();
    for (const auto& [shape, provider] : choices) g[shape] = provider;
    p["gemm_choices"] = g;
  }
  p["threads"] = threads;
  p["ranks"] = comm.size();
  p["tp"] = c.parallel.tp;
  p["pp"] = c.parallel.pp;
  p["cp"] = c.parallel.cp;
  p["dp"] = comm.size() / (c.parallel.tp * c.parallel.pp * c.parallel.cp);
  p["microbatches"] = c.parallel.microbatches;
  p["schedule"] = to_string(c.parallel.schedule);
  p["zero"] = st.zero_stage;
  p["vocab_parallel"] = st.model->tp().shape().vocab;
  p["precision"] = to_string(c.train.precision);
  p["deterministic"] = c.train.deterministic;
  p["block_types"] = TpLayout{c.parallel.tp, 0, c.parallel.blocks(), nullptr}.describe();
  p["hostfile"] = req.hostfile;
  p["seed"] = c.train.seed;
  p["init"] = to_string(st.model_config.init);
  p["config_file"] = req.config_file;
  p["run_id"] = run_id;
  p["peak_gflops"] = round_fixed(peak.gflops, 2);
  p["peak_source"] = peak.source;
  return p;
}

// The two lines that open a run's log: the model and data, the layout and the MFU peak.
void announce(const RunLogger& log, const RunLayout& run, const RunState& st, Communicator& comm, int threads,
              const MfuPeak& peak, double max_loss) {
  const RunConfig& c = run.config;
  log.note(fmt::format("model {} ({} parameters), {} tokens ({} train, {} val), vocabulary {}",
                       st.model_config.describe(), st.model->num_params(), st.data.size(), st.data.split.train.size(),
                       st.data.split.val.size(), st.data.tok.size()));
  if (st.data.shards) log.note(st.data.shards->describe());  // which files, from prepare's manifest
  log.note(fmt::format("{} backend, {} ranks x {} threads, batch {} x {} ({} rows per replica), {} steps from step {}, "
                       "MFU peak {:.1f} GFLOP/s ({}), divergence bound: loss {:.4g}", st.backend->name(), comm.size(),
                       threads, c.train.batch_size, c.train.seq_len, st.rows, c.train.steps, st.first_step,
                       peak.gflops, peak.source, max_loss));
  const TpLayout& tp = st.model->tp();
  const LayoutFacts facts{st.model_config, st.model->num_params(), st.moments->updated(), st.moments->units(),
                          tp.describe(), tp.has_private(), tp.pieces};
  for (const std::string& line : run.notes(facts)) log.note(line);
  if (!st.unchecked.empty()) {
    std::string keys;
    for (const std::string& k : st.unchecked) keys += (keys.empty() ? "" : ", ") + k;
    log.note(fmt::format("the checkpoint's format records no {}: resuming could not check them", keys));
  }
}

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

// The loss on the first train.eval_batches batches of the validation split,
// over the global batch (every data-parallel replica takes its rows).
double validation_loss(StepFunction& step, const RunConfig& c, const RunState& st, int replica, StepFeed& feed) {
  DataLoader val(st.data.split.val, c.train.batch_size, c.train.seq_len, LoaderKind::kSequential, c.train.seed,
                 replica * st.rows, st.rows);
  return evaluate(step, c.train.eval_batches, feed.inputs(), feed.targets(), [&](int32_t*, int32_t*) {
    val.next(feed.x(), feed.y());
    feed.cut();
  });
}

// The original's inference: a continuation of the first generate.prompt_tokens
// corpus tokens (greedy by default), timed; into the summary.
void generate_from_corpus(const RunConfig& c, RunState& st, const Gpt2& model, RunSummary& sum) {
  // The prompt: the training stream's first tokens.
  std::vector<int32_t> prompt(
      static_cast<size_t>(std::min<int64_t>(c.generate.prompt_tokens, st.data.split.train.size())));
  st.data.split.train.read(0, prompt);
  GenerateConfig gen_cfg = c.generate;
  gen_cfg.vocab_limit = st.data.tok.size();
  const auto g0 = Clock::now();
  const Generation gen = generate(*st.backend, model, prompt, gen_cfg, st.data.tok.eos_id());
  sum.inference_s = seconds_since(g0);
  sum.generated_tokens = static_cast<int64_t>(gen.tokens.size());
  sum.generated_text = st.data.tok.decode(gen.tokens);
}

// The pipeline's timeline of the first kTimelineSteps steps, one JSON line
// per step beside the metrics stream (timeline.jsonl, written by rank 0):
//   {"step":s,"ranks":[{"rank":r,"stage":k,"events":[["F",mb,t0_ms,t1_ms,stage],..]},..]}
// Times are milliseconds from the start of the step on each rank's own clock;
// an event's stage is the virtual stage (the rank's chunk) it served, the
// rank's own without parallel.virtual_stages.
constexpr size_t kEventFloats = 5;
constexpr int64_t kTimelineSteps = 10;

const char* const kEventKinds[] = {"F", "BW", "B", "W", "recv", "send"};

float event_code(const char* kind) {
  for (size_t i = 0; i < std::size(kEventKinds); ++i) {
    if (std::strcmp(kind, kEventKinds[i]) == 0) return static_cast<float>(i);
  }
  return -1.0f;
}

// Every rank's wait and arenas in use (and, for the first steps, its
// timeline) gathered to rank 0 after each step, over the grid's unaccounted
// group; the timeline written beside the metrics by rank 0. The gather's
// buffers are sized once: a step allocates nothing for them.
class PipelineRecorder {
 public:
  PipelineRecorder(ProcessGrid& grid, const PipelineEngine& pipe, const std::string& timeline_path)
      : aux_(grid.aux_comm()),
        pipe_(pipe),
        // The same count on every rank (an all-gather's chunk): from what every
        // stage shares, not from its own arenas (1f1b gives stages different
        // ones). A step records at most 7m events plus one send wait per arena
        // (<= max(m, p)).
        max_events_(static_cast<size_t>(8 * pipe.microbatches() * pipe.chunks() + 8 +
                                        std::max(pipe.microbatches() * pipe.chunks(), pipe.stages()))),
        mine_(4 + kEventFloats * max_events_),
        all_(mine_.size() * static_cast<size_t>(aux_.size())) {
    if (timeline_path.empty()) return;
    out_ = ::fdopen(open_output(timeline_path), "w");
    if (!out_) throw std::runtime_error(fmt::format("{}: cannot write the pipeline timeline", timeline_path));
  }
  ~PipelineRecorder() {
    if (out_) std::fclose(out_);
  }
  PipelineRecorder(const PipelineRecorder&) = delete;
  PipelineRecorder& operator=(const PipelineRecorder&) = delete;

  void gather(int64_t step, StepRecord& rec) {
    const bool with_events = step < kTimelineSteps;
    const size_t max_events = with_events ? max_events_ : 0;
    const size_t chunk = 4 + kEventFloats * max_events;
    const auto& ev = pipe_.timeline();
    const size_t n = std::min(ev.size(), max_events);
    std::fill(mine_.begin(), mine_.begin() + static_cast<std::ptrdiff_t>(chunk), 0.0f);
    mine_[0] = static_cast<float>(pipe_.wait_s() * 1e3);
    mine_[1] = static_cast<float>(pipe_.peak_in_flight());
    mine_[2] = static_cast<float>(pipe_.stage());
    mine_[3] = static_cast<float>(n);
    for (size_t i = 0; i < n; ++i) {
      float* e = mine_.data() + 4 + kEventFloats * i;
      e[0] = event_code(ev[i].kind);
      e[1] = static_cast<float>(ev[i].mb);
      e[2] = static_cast<float>(ev[i].t0_ms);
      e[3] = static_cast<float>(ev[i].t1_ms);
      e[4] = static_cast<float>(ev[i].stage);
    }
    aux_.all_gather(mine_.data(), all_.data(), chunk);
    if (aux_.rank() != 0) return;
    Json ranks = Json::array();
    for (int r = 0; r < aux_.size(); ++r) {
      const float* x = all_.data() + static_cast<size_t>(r) * chunk;
      rec.stage_wait_ms.push_back(x[0]);
      rec.stage_arenas.push_back(static_cast<int>(x[1]));
      if (!with_events) continue;
      Json events = Json::array();
      for (size_t i = 0; i < static_cast<size_t>(x[3]); ++i) {
        const float* e = x + 4 + kEventFloats * i;
        const int code = static_cast<int>(e[0]);
        events.push_back(Json::array({code >= 0 ? kEventKinds[code] : "?", static_cast<int>(e[1]),
                                      round_fixed(e[2], 3), round_fixed(e[3], 3), static_cast<int>(e[4])}));
      }
      ranks.push_back(Json{{"rank", r}, {"stage", static_cast<int>(x[2])}, {"events", events}});
    }
    if (with_events && out_) {
      const std::string line = Json{{"step", step}, {"ranks", ranks}}.dump() + "\n";
      if (std::fputs(line.c_str(), out_) < 0 || std::fflush(out_) != 0) {
        throw std::runtime_error("timeline.jsonl: writing the pipeline timeline failed");
      }
    }
  }

 private:
  Communicator& aux_;
  const PipelineEngine& pipe_;
  size_t max_events_;
  std::vector<float> mine_, all_;
  std::FILE* out_ = nullptr;
};

// This rank's memory by kind (bytes), as allocated (RankMemory, train/plan.h).
RankMemory rank_memory(const RunState& st, const PipelineEngine* pipe, const ActivationArena* arena, int dp) {
  RankMemory m;
  const Gpt2& model = *st.model;
  const uint64_t whole = model.padded_params() * sizeof(float);
  m.params = model.residency() == Residency::kNone ? st.sharded->param_shard_bytes() : whole;
  m.grads = model.residency() == Residency::kWhole ? whole : st.sharded->grad_shard_bytes();
  m.moments = st.opt->state_bytes();
  set_arena(m, pipe ? pipe->arena_kinds() : arena->kinds());  // as the arenas carved themselves
  m.arena = pipe ? pipe->arena_bytes() : arena->bytes();        // as allocated
  m.arenas = static_cast<uint64_t>(pipe ? pipe->arenas() : 1);
  if (pipe && pipe->chunks() > 1) m.chunk_arenas = pipe->activation_bytes();  // the chunks' arenas differ
  if (st.sharded) {
    m.gathered = st.sharded->param_slot_bytes();
    m.comm_buffers = st.sharded->grad_slot_bytes();
  }
  m.count = model.num_params();
  m.formula = zero_formula_bytes(m.count, dp, st.zero_stage, st.zero.has_value());
  return m;
}

// Each rank's RankMemory, gathered to rank 0 for the summary, with the
// rank's peak resident set so far (the process as the system counts it:
// libraries, communication buffers and transients included).
Json memory_per_rank(ProcessGrid& grid, const RankMemory& mem, int zero_stage) {
  // One record per rank, gathered as it is (the Communicator moves trivially copyable host values as bytes).
  struct Record {
    RankMemory mem;
    uint64_t stage = 0, peak_rss = 0;
  };
  static_assert(std::is_trivially_copyable_v<Record>);
  Communicator& aux = grid.aux_comm();
  const Record mine{mem, static_cast<uint64_t>(grid.stage()),
                    static_cast<uint64_t>(peak_rss_mb() * 1024.0 * 1024.0)};
  std::vector<Record> all(static_cast<size_t>(aux.size()));
  aux.all_gather(&mine, all.data(), 1);
  Json out = Json::array();
  for (int r = 0; r < aux.size(); ++r) {
    const RankMemory& m = all[static_cast<size_t>(r)].mem;
    auto i64 = [](uint64_t v) { return static_cast<int64_t>(v); };
    out.push_back(Json{{"rank", r}, {"stage", i64(all[static_cast<size_t>(r)].stage)}, {"zero", zero_stage},
                       {"params_bytes", i64(m.params)}, {"grads_bytes", i64(m.grads)},
                       {"moments_bytes", i64(m.moments)}, {"arena_bytes", i64(m.arena)}, {"arenas", i64(m.arenas)},
                       {"activations_bytes", i64(m.activations())}, {"gathered_bytes", i64(m.gathered)},
                       {"comm_buffer_bytes", i64(m.comm_buffers)},
                       {"model_state_bytes", i64(m.params) + i64(m.grads) + i64(m.moments)},
                       {"formula_bytes", i64(m.formula)}, {"params", i64(m.count)},
                       {"arena_embed_bytes", i64(m.arena_embed)}, {"arena_layers_bytes", i64(m.arena_layers)},
                       {"arena_head_bytes", i64(m.arena_head)}, {"arena_scratch_bytes", i64(m.arena_scratch)},
                       {"peak_rss_bytes", i64(all[static_cast<size_t>(r)].peak_rss)}});
  }
  return out;
}

// The stop signal agreed inside a step (StepLayout::stop_in_step), kept for
// the stop that follows. Asks only while armed, which every rank sets alike
// at each step's end (arm: from what the ranks agreed there).
class AgreedInterrupt final : public StepInterrupt {
 public:
  AgreedInterrupt(Communicator& comm, StepLayout::StopInStep when, double long_step_s)
      : comm_(comm), when_(when), long_step_s_(long_step_s), armed_(when == StepLayout::StopInStep::kAlways) {}
  bool stop_now() override {
    if (!armed_ || !in_step) return false;
    agreed = agreed_stop(comm_);
    return agreed.signal != 0;
  }
  // kLongSteps: the steps after one that took longer than debug.long_step_s on some rank.
  void arm(const StopRequest& at_step_end) {
    if (when_ == StepLayout::StopInStep::kLongSteps) armed_ = at_step_end.step_s > long_step_s_;
  }
  StopRequest agreed;
  bool in_step = false;  // only a training step stops inside (not validation's forwards through ZeRO's units)

 private:
  Communicator& comm_;
  StepLayout::StopInStep when_;
  double long_step_s_;
  bool armed_;
};

// The run's layout, made once from the configuration (DESIGN.md "Memory":
// one step function per layout): the activation arena, or the pipeline's
// arenas; the gradient reducer; the step function; the pipeline's recorder;
// this rank's memory; the stop between micro-steps.
struct Layout {
  std::unique_ptr<AgreedInterrupt> interrupt;
  std::unique_ptr<PipelineEngine> pipe;
  std::optional<ActivationArena> arena;
  std::unique_ptr<GradReducer> reducer;
  std::unique_ptr<StepFunction> step;
  std::optional<PipelineRecorder> recorder;
  RankMemory mem;
};

std::unique_ptr<Layout> make_layout(const RunConfig& c, const StepLayout& sl, RunState& st, ProcessGrid& grid,
                                    double max_loss, const std::string& timeline_path) {
  if (sl.stored == Dtype::bf16 && !st.backend->accepts_bf16()) {  // the layout's stage rule and the backend disagree
    throw std::logic_error(fmt::format("the {} backend does not take the bf16 activations the layout stores",
                                       st.backend->name()));
  }
  auto lay = std::make_unique<Layout>();
  Backend& be = *st.backend;
  Gpt2& model = *st.model;
  // The gradient sum and the loss over the data-parallel group; the
  // tensor-parallel sums happen inside the model (model.tp()).
  Communicator& dp = sl.over_replicas ? grid.replica_comm() : grid.dp_comm();
  if (sl.stop_in_step != StepLayout::StopInStep::kNever) {
    lay->interrupt = std::make_unique<AgreedInterrupt>(grid.aux_comm(), sl.stop_in_step, c.debug.long_step_s);
    if (sl.grad_sum == GradSum::kUnitShards) {  // ZeRO-2/3: also before each unit
      st.sharded->before_unit([i = lay->interrupt.get()] {
        if (i->stop_now()) throw StepAbandoned();
      });
    }
  }
  const StepParts parts{be, model, *st.opt, dp, c.train.batch_size, max_loss, c.train.layer_grad_norms,
                        lay->interrupt.get()};
  // The reducer (none for the tree and for unit shards, which the step drives itself).
  switch (sl.grad_sum) {
    case GradSum::kBuckets:
      lay->reducer = std::make_unique<GradientSync>(dp, model.grad_data(), model.num_params(),
                                                    static_cast<size_t>(c.train.grad_bucket_mb * (1 << 20) / sizeof(float)));
      break;
    case GradSum::kContiguousShards:
      lay->reducer = std::make_unique<ContiguousShardSync>(dp, model.param_data(), model.grad_data(), st.zero->chunk);
      break;
    case GradSum::kUnitShards:
    case GradSum::kTree:
      break;
  }
  // Under train.deterministic: the tree's gradient scattered into the contiguous shards
  // (canonical_reduce_scatter) or ZeRO-3's unit pieces, else whole.
  TreeShards shards;
  if (sl.grad_sum == GradSum::kContiguousShards) shards = {st.zero->chunk, lay->reducer.get(), nullptr};
  if (sl.grad_sum == GradSum::kUnitShards) shards.zero3 = st.sharded.get();
  if (sl.pipelined()) {  // the schedule's arenas, one per microbatch in flight
    lay->pipe = std::make_unique<PipelineEngine>(be, model, grid.pp_comm(), st.stage_split, sl.schedule, sl.microbatches,
                                                 sl.arena_rows * sl.microbatches, c.train.seq_len, sl.recompute_full,
                                                 sl.stored, sl.microbatch_sum, sl.sequence_parallel, grid.context());
    lay->recorder.emplace(grid, *lay->pipe, timeline_path);
  } else {
    lay->arena.emplace(model, sl.arena_rows, c.train.seq_len, false, sl.recompute_full, sl.stored,
                       sl.sequence_parallel, grid.context());
  }
  switch (sl.step) {
    case StepKind::kReplica:
      lay->step = sl.grad_sum == GradSum::kUnitShards ? sharded_step(parts, lay->arena->acts(), *st.sharded)
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
        deterministic_buffer_floats(model.num_params(), sl.chunks, dp.size(), shards.chunk) * sizeof(float);
  } else if (sl.step == StepKind::kChunkPipeline) {
    lay->mem.comm_buffers += (static_cast<uint64_t>(PipelineEngine::tree_buffers(lay->pipe->arenas(),
                                                                                 sl.microbatches)) +
                              (grid.dp() > 1 ? 1 : 0)) * model.num_params() * sizeof(float);
  }
  return lay;
}

// One step's record: the step's loss and update, its time and throughput,
// each group's communication, this rank's memory.
StepRecord step_record(int64_t s, const StepResult& r, double dt, double comm_s, ProcessGrid& grid,
                       const RankMemory& mem, double tokens, double flops, double peak_gflops) {
  StepRecord rec;
  const CommStats tp = grid.tp_comm().stats(), pp = grid.pp_comm().stats(), cp = grid.cp_comm().stats();
  CommStats dp = grid.dp_comm().stats();
  if (&grid.replica_comm() != &grid.dp_comm()) {  // train.deterministic under cp: the replicas' tree, data-parallel
    const CommStats r = grid.replica_comm().stats();
    dp.calls += r.calls;
    dp.bytes += r.bytes;
  }
  rec.step = s;
  rec.loss = r.loss;
  rec.lr = r.update.lr;
  rec.grad_norm = r.update.grad_norm;
  rec.step_ms = dt * 1e3;
  rec.tokens_per_s = tokens / dt;
  rec.flops_per_s = flops / dt;
  rec.mfu = flops / dt / (peak_gflops * 1e9);
  rec.comm_ms = comm_s * 1e3;
  rec.comm_bytes = tp.bytes + dp.bytes + pp.bytes + cp.bytes;
  rec.tp_calls = tp.calls;
  rec.tp_bytes = tp.bytes;
  rec.dp_calls = dp.calls;
  rec.dp_bytes = dp.bytes;
  rec.pp_calls = pp.calls;
  rec.pp_bytes = pp.bytes;
  rec.cp_calls = cp.calls;
  rec.cp_bytes = cp.bytes;
  rec.mem_params = mem.params;
  rec.mem_grads = mem.grads;
  rec.mem_moments = mem.moments;
  rec.mem_activations = mem.activations();
  rec.mem_gathered = mem.gathered;
  rec.mem_comm_buffers = mem.comm_buffers;
  rec.peak_rss_mb = peak_rss_mb();
  rec.layer_grad_norms = r.layer_grad_norms;
  return rec;
}

// The end of a run, after the last step: the checkpoint is written; then
// generation on data-parallel replica 0: rank 0 alone, or with tensor
// parallelism its whole tensor-parallel group, each rank decoding with its
// heads and shards (the same collective forward as training, on a
// one-token arena) and drawing the same tokens from the same logits.
// Pipeline stages first gather the whole model (every stage's tensors) on
// the first stage's ranks, which generate; the other stages wait. ZeRO-3's
// shards are first gathered over the data-parallel group. With
// generate.max_new_tokens 0 nothing is gathered (a model larger than one
// rank's memory ends as it trained).
void finish_run(const TrainRequest& req, RunState& st, ProcessGrid& grid, RunLogger& log,
                RunSummary& sum, const Json& memory, const Json& provenance) {
  const RunConfig& c = req.config;
  Communicator& comm = grid.world();
  const bool generates = c.generate.max_new_tokens > 0;
  // ZeRO-3: this replica's weights, gathered over the data-parallel group (only to generate: the whole model).
  std::vector<float> local;
  if (generates && !st.params->in_model()) local = st.params->gather(grid.dp_comm().rank() == 0);
  if (grid.dp_comm().rank() != 0) {
    comm.barrier();  // idle (no spinning) while replica 0 generates
    return;
  }
  std::unique_ptr<Gpt2> whole;
  Backend& be = *st.backend;
  if (grid.pp() > 1 && !generates) {  // nothing to generate: no stage gathers the whole model
    if (grid.stage() != 0) {
      comm.barrier();
      return;
    }
  } else if (grid.pp() > 1) {
    const std::vector<float> full =
        gather_full(st.model_config, grid, st.model->params_to_host(), st.stage_split, st.model->tp().vocab);
    if (grid.stage() != 0) {
      comm.barrier();
      return;
    }
    whole = std::make_unique<Gpt2>(st.model_config, be.memory(), grid.layout(c.parallel.blocks(), st.model->tp().vocab));
    whole->params_from_host(shard_of(st.model_config, whole->tp().shape(), grid.tp_comm().rank(), full));
  } else if (!local.empty()) {
    whole = std::make_unique<Gpt2>(st.model_config, be.memory(), grid.layout(c.parallel.blocks(), st.model->tp().vocab));
    whole->params_from_host(local);
  }
  if (generates) generate_from_corpus(c, st, whole ? *whole : *st.model, sum);  // inference as in the original
  if (comm.rank() != 0) {
    comm.barrier();
    return;
  }
  const double tokens_per_step = static_cast<double>(c.train.batch_size) * c.train.seq_len;
  sum.steps = c.train.steps;
  sum.first_step = st.first_step;
  sum.ranks = comm.size();
  sum.tokens_per_s = sum.train_s > 0 ? (c.train.steps - st.first_step) * tokens_per_step / sum.train_s : 0.0;
  sum.peak_rss_mb = peak_rss_mb();
  // The run's last checkpoint (run_train names a sharded one's folder): by default DIR/checkpoint.bin.
  if (sum.checkpoint.empty() && c.train.save_checkpoint) sum.checkpoint = (fs::path(req.out_dir) / kCheckpointFile).string();
  sum.provenance = provenance;
  sum.provenance["memory"] = memory;
  log.finish(sum);
  comm.barrier();
}

}  // namespace

int max_threads() {
  const unsigned cores = std::min(std::thread::hardware_concurrency(), 1u << 20);  // 0: unknown
  return std::max(64, 4 * static_cast<int>(cores));
}

int check_threads(int threads, const char* what) {
  if (threads > max_threads()) {
    throw std::invalid_argument(fmt::format("{}: {} threads is above the limit of {} (4 x the {} cores this machine "
                                            "reports, at least 64)", what, threads, max_threads(),
                                            std::thread::hardware_concurrency()));
  }
  return threads;
}

int resolve_threads(int threads) {
  check_threads(threads, "train.threads");
  return threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

namespace {
// The request checked before anything is made, and the run's layout
// (train/layout.h: every refusal the plan gives, in its order).
RunLayout checked_request(const TrainRequest& req, const StageContext& ctx, Communicator& comm) {
  validate(req.config);
  if (!req.hostfile.empty()) check_placement(read_hostfile(req.hostfile), req.hostfile, comm);
  if (req.overwrite && !req.resume.empty()) {
    throw std::invalid_argument("--overwrite and --resume together: --resume continues the directory's run, "
                                "--overwrite discards it; give one");
  }
  return resolve_run(req.config, comm.size(), ctx.stage);
}
}  // namespace

// `--resume auto` made a path or a fresh start (run_dir.h resolve_auto_resume),
// decided by rank 0 from what the folder holds and sent to every rank, so
// that all resume or all start afresh (a refusal is every rank's, exit 2).
// Returns the log's note ("" when the request did not say auto).
std::string resolve_auto(TrainRequest& req, Communicator& comm) {
  if (req.resume != "auto") return "";
  std::vector<std::string> d;  // refused ("1") or not, replace ("1") or not, the checkpoint, the note or refusal
  if (comm.rank() == 0) {
    try {
      const AutoResume r = resolve_auto_resume(req.out_dir);
      d = {"0", r.replace ? "1" : "0", r.checkpoint, r.note};
    } catch (const std::invalid_argument& e) {
      d = {"1", "0", "", e.what()};
    }
  }
  broadcast_strings(comm, d, 0);
  if (d[0] == "1") throw std::invalid_argument(d[3]);
  req.overwrite = d[1] == "1";
  req.resume = d[2];
  return d[3];
}

// Takes the request's run directory: new, resumed or overwritten (its
// --config file is never taken for one of the run's files), `--resume auto`
// first made a path or a fresh start.
void claim_run_dir(RunLogger& log, TrainRequest& req, Communicator& comm) {
  if (const std::string note = resolve_auto(req, comm); !note.empty()) log.note(note);
  std::vector<fs::path> inputs;
  if (!req.config_file.empty()) inputs.push_back(req.config_file);
  log.claim(req.out_dir,
            !req.resume.empty() ? DirIntent::kResume : req.overwrite ? DirIntent::kOverwrite : DirIntent::kNew,
            inputs);
}

// Collective: every rank's `bytes` in MB, "a b c d" (rank 0's text; 0: unknown).
std::string per_rank_mb(Communicator& comm, uint64_t bytes) {
  std::vector<uint64_t> all(static_cast<size_t>(comm.size()));
  comm.all_gather(&bytes, all.data(), 1);
  std::string text;
  for (uint64_t b : all) text += fmt::format("{}{:.0f}", text.empty() ? "" : " ", static_cast<double>(b) / 1e6);
  return text;
}

// The newest checkpoint of this run in its folder: after which step (the
// same on every rank, -1 for none) and its file (rank 0).
struct LastCheckpoint {
  int64_t step = -1;
  std::string file;
};

// The ranks agreed to stop for a signal after `steps` steps (`abandoned`:
// the next was under way, and is dropped): the training checkpoint of this
// state (unless `last` is already it), the record, then RunPreempted on
// every rank (train/preemption.h).
[[noreturn]] void stop_for_signal(const StopRequest& stop, int64_t steps, bool abandoned, const LastCheckpoint& last,
                                  const std::string& out_dir, const RunState& st, const RunConfig& c,
                                  ProcessGrid& grid, RunLogger& log, CheckpointWriter& writer) {
  const auto t0 = Clock::now();
  std::string path =
      last.step == steps ? last.file : writer.save(out_dir, steps, st, c, log.run_id(), grid, nullptr);
  writer.finish(grid, steps);  // an asynchronous save (this one, or the one before) completes before the exit
  if (path.empty()) path = (fs::path(out_dir) / kCheckpointFile).string();  // the other ranks: its name in the run folder
  const double to_exit = stop.waited_s + seconds_since(t0);
  log.preempted(steps - 1, signal_name(stop.signal), to_exit, path, abandoned);
  const std::string when = abandoned ? fmt::format("during step {} of {} (abandoned)", steps, c.train.steps)
                                     : fmt::format("after step {} of {}", steps - 1, c.train.steps);
  throw RunPreempted(fmt::format("stopped by {} {}, checkpoint {} written; resume with --resume auto",
                                 signal_name(stop.signal), when, path));
}

// The run folder's complete checkpoint after `first_step` steps (a resumed
// run's), or none. Decided on rank 0 for every rank (whether a save is
// written is collective).
LastCheckpoint already_stored(const std::string& out_dir, int64_t first_step, Communicator& comm) {
  std::vector<std::string> d;
  if (comm.rank() == 0) {
    d = {""};
    for (const StoredCheckpoint& s : stored_checkpoints(out_dir)) {
      if (first_step > 0 && s.step == first_step && s.complete()) d = {s.file().string()};
    }
  }
  broadcast_strings(comm, d, 0);
  if (d[0].empty()) return {};
  return {first_step, comm.rank() == 0 ? d[0] : ""};
}

void run_train(const TrainRequest& given, const StageContext& ctx) {
  std::unique_ptr<Communicator> local;
  Communicator& comm = ctx.comm ? *ctx.comm : *(local = make_local_communicator());
  const RunLayout run = checked_request(given, ctx, comm);
  install_stop_handlers();  // a signal from here on stops the run at its next step's end, with a checkpoint
  TrainRequest req = given;
  req.config = run.config;
  const RunConfig& c = req.config;
  const int threads = resolve_threads(c.train.threads);
  // Make: the run directory, the grid, the state, the layout.
  RunLogger log(ctx.stage, comm.rank() == 0);
  claim_run_dir(log, req, comm);
  check_ranks_agree(c, comm);  // before the grid: its split needs every rank's parallel.tp to agree
  ProcessGrid grid(comm, c.parallel.tp, c.parallel.pp, c.parallel.cp);
  const bool resuming = !req.resume.empty();
  if (resuming) reset_peak_rss();  // the resume's peak, per rank, said below
  const std::unique_ptr<RunState> st = init_or_resume(c, req.resume, ctx.backend, threads, 0, grid);
  if (resuming) {
    log.check_resume(req.resume, st->checkpoint_run_id);
    log.note(fmt::format("resumed at step {}: peak resident set while starting (corpus, model, checkpoint read) "
                         "per rank, MB: {}", st->first_step, per_rank_mb(comm, phase_peak_rss_bytes())));
  }
  RunConfig resolved = c;
  resolved.model = st->model_config;
  log.open(to_yaml(resolved), resuming, st->first_step);
  const MfuPeak peak = mfu_peak(c, ctx, *st, comm, threads);
  log.set_peak_configured(c.train.peak_gflops > 0);
  // The divergence bound: train.max_loss, or three times the loss of a uniform guess.
  const double max_loss = c.train.max_loss > 0 ? c.train.max_loss : 3.0 * std::log(st->model_config.V);
  // The step, decided once with the run's layout: the log, the layout and the plan read it (train/layout.h).
  const StepLayout& sl = run.step;
  announce(log, run, *st, comm, threads, peak, max_loss);
  // The step and its arenas see the rows as run.steps does (context parallelism's chunks).
  const std::unique_ptr<Layout> lay = make_layout(
      run.steps, sl, *st, grid, max_loss, comm.rank() == 0 ? (fs::path(req.out_dir) / "timeline.jsonl").string() : "");
  StepFeed feed(run, grid);
  const double tokens_per_step = static_cast<double>(c.train.batch_size) * c.train.seq_len;
  const double flops = training_flops(st->model_config, c.train.batch_size, c.train.seq_len).total();
  // Writes the checkpoint after `steps` steps (train.save_checkpoint) and
  // notes it in `stored`; returns the state's
  // hash (rank 0's is the summary's). `last`: under train.deterministic the
  // state is hashed even when no checkpoint is written, for the bits'
  // comparison.
  // The newest checkpoint written: a resumed run's own first one is already
  // there (a save at that step would only rewrite it).
  LastCheckpoint stored = already_stored(req.out_dir, st->first_step, comm);
  const std::unique_ptr<CheckpointWriter> writer =  // train.checkpoint_format and async_checkpoint, once
      make_checkpoint_writer(c, [&log](const std::string& note) { log.note(note); });
  auto save = [&](int64_t steps, bool last) {
    uint64_t hash = 0;
    if (c.train.save_checkpoint && stored.step != steps) {
      const uint64_t before = rss_bytes();
      reset_peak_rss();
      stored = {steps, writer->save(req.out_dir, steps, *st, c, log.run_id(), grid, &hash)};
      const std::string peak = per_rank_mb(comm, phase_peak_rss_bytes()), was = per_rank_mb(comm, before);
      const std::string copy =
          writer->last_snapshot_s() > 0 ? fmt::format(", {:.3f} s of it the snapshot", writer->last_snapshot_s()) : "";
      log.note(fmt::format("checkpoint after step {}: {} ({:.3f} s in the loop{}; resident set per rank before it, "
                           "MB: {}; its peak during it: {})", steps, stored.file, writer->last_wait_s(), copy, was,
                           peak));
      if (!writer->hashes()) return std::string();  // sharded: no rank holds the whole state to hash
    } else if ((c.train.save_checkpoint && writer->hashes()) || (last && sl.deterministic())) {
      hash = save_training_checkpoint("", *st, c, log.run_id(), grid);  // written already, or not at all
    } else {
      return std::string();
    }
    return fmt::format("{:016x}", hash);
  };

  // Loop.
  RunSummary sum;
  const auto wall0 = Clock::now();
  for (int64_t s = st->first_step; s < c.train.steps; ++s) {
    const auto t0 = Clock::now();
    if (comm.rank() == c.debug.fail_rank && s == c.debug.fail_step) {
      throw std::runtime_error(fmt::format("rank {}: injected failure at step {} (debug.fail_rank)", comm.rank(), s));
    }
    const int64_t position = st->loader->position(), served = st->loader->batches_served();
    st->loader->next(feed.x(), feed.y());
    feed.cut();
    grid.reset_stats();
    StepResult r;
    try {
      if (lay->interrupt) lay->interrupt->in_step = true;
      r = lay->step->step(feed.inputs(), feed.targets());
      if (lay->interrupt) lay->interrupt->in_step = false;
    } catch (const StepAbandoned&) {  // a stop signal inside the step: the state after step s - 1
      st->loader->restore(position, served);
      stop_for_signal(lay->interrupt->agreed, s, true, stored, req.out_dir, *st, c, grid, log, *writer);
    }
    st->backend->synchronize();  // a device backend's update is still running: count it in this step
    const double dt = seconds_since(t0);
    const double comm_s = r.comm_s + grid.tp_group().seconds() + grid.pp_group().seconds() +
                          grid.dp_group().seconds() + grid.ring().seconds() + (lay->pipe ? lay->pipe->wait_s() : 0.0);
    sum.train_s += dt;
    sum.comm_s += comm_s;
    sum.final_loss = r.loss;
    StepRecord rec = step_record(s, r, dt, comm_s, grid, lay->mem, tokens_per_step, flops, peak.gflops);
    if (lay->recorder) lay->recorder->gather(s, rec);
    log.step(rec, c.train.steps, comm.size() > 1);
    if (st->eval_on && ((s + 1) % c.train.eval_every == 0 || s + 1 == c.train.steps)) {
      log.eval({s, validation_loss(*lay->step, c, *st, grid.replica(), feed)}, c.train.steps);
    }
    const bool periodic = c.train.checkpoint_every > 0 && (s + 1) % c.train.checkpoint_every == 0;
    if (periodic) save(s + 1, false);
    writer->poll(grid, s + 1);  // an asynchronous save whose files are all written completes
    if (c.debug.step_sleep_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(c.debug.step_sleep_s));
    const StopRequest stop = agreed_stop(grid.aux_comm(), dt);
    if (stop.signal != 0) stop_for_signal(stop, s + 1, false, stored, req.out_dir, *st, c, grid, log, *writer);
    if (lay->interrupt) lay->interrupt->arm(stop);
  }

  // Finish.
  sum.train_wall_s = seconds_since(wall0);
  sum.state_hash = save(c.train.steps, true);
  writer->finish(grid, c.train.steps);
  if (!writer->hashes()) sum.checkpoint = stored.file;  // a sharded checkpoint's folder (DIR/checkpoint.bin names none)
  const Json memory = memory_per_rank(grid, lay->mem, st->zero_stage);
  const Json provenance =
      comm.rank() == 0 ? run_provenance(req, ctx, *st, comm, threads, peak, log.run_id()) : Json::object();
  finish_run(req, *st, grid, log, sum, memory, provenance);
}

namespace {

// What rank 0 read for evaluate, before any work: the model file, its
// tokenizer (or GPT-2's from data.*), and the multiple-choice examples.
struct EvaluateInputs {
  std::optional<ModelWeights> weights;
  std::optional<Tokenizer> tok;
  std::vector<ChoiceExample> examples;
};

// Rank 0 reads --model (and --hellaswag); every rank takes the model's
// settings and its tokenizer's kind into `c`, or throws rank 0's refusal.
EvaluateInputs read_evaluate_inputs(const EvaluateRequest& req, RunConfig& c, Communicator& comm) {
  EvaluateInputs in;
  std::vector<std::string> d = {""};  // the refusal, then the tokenizer's kind, then the model's keys and values
  if (comm.rank() == 0) {
    try {
      in.weights = read_model_weights(req.model, "--model");
      if (in.weights->tokenizer) {
        in.tok = *in.weights->tokenizer;
      } else {
        if (c.data.encoder_json.empty() || c.data.vocab_bpe.empty()) {
          throw std::invalid_argument(fmt::format("--model: '{}' keeps no tokenizer: give GPT-2's files as "
                                                  "data.encoder_json and data.vocab_bpe (docs/tokenizer.md)",
                                                  req.model));
        }
        in.tok = Tokenizer::gpt2(load_bpe_tokenizer(c.data.encoder_json, c.data.vocab_bpe));
      }
      const Gpt2Config model = resolve_vocab(in.weights->config, in.tok->size());
      if (!req.hellaswag.empty()) in.examples = read_choice_examples(req.hellaswag, *in.tok, model.T);
      d.push_back(to_string(in.tok->kind()));
      Gpt2Config copy = in.weights->config;
      Fields f;
      f.add_section("model", copy);
      for (const auto& [k, v] : f.values()) {
        d.push_back(k);
        d.push_back(v);
      }
    } catch (const std::invalid_argument& e) {
      d = {e.what()};
    }
  }
  broadcast_strings(comm, d, 0);
  if (!d[0].empty()) throw std::invalid_argument(d[0]);
  c.data.tokenizer = parse_tokenizer_kind(d[1]);
  Fields f;
  f.add_section("model", c.model);
  for (size_t i = 2; i + 1 < d.size(); i += 2) f.set(d[i], d[i + 1], "--model");
  return in;
}

// Multiple-choice scoring on rank 0 with the whole model (train/multiple_choice.h).
Json score_multiple_choice(const EvaluateRequest& req, const RunConfig& c, const EvaluateInputs& in,
                           const StageContext& ctx, int threads) {
  const Gpt2Config mc = resolve_vocab(c.model, in.tok->size());
  auto be = ctx.backend.make(backend_options(c, mc, threads, ctx.comm ? ctx.comm->local_rank() : 0));
  Gpt2 model(mc, be->memory());
  model.params_from_host(fit_weights(*in.weights, mc, "--model", req.model));
  // One forward per example: a row per ending, padded with [EOS] to the longest row of the file.
  size_t rows = 0, T = 0;
  for (const ChoiceExample& ex : in.examples) {
    rows = std::max(rows, ex.endings.size());
    for (const auto& e : ex.endings) T = std::max(T, ex.context.size() + e.size() - 1);
  }
  ActivationArena arena(model, static_cast<int>(rows), static_cast<int>(T));
  std::vector<int32_t> x(rows * T), y(rows * T);
  std::vector<float> losses(rows * T);
  int64_t correct = 0, correct_norm = 0;
  Json details = Json::array();
  const auto t0 = Clock::now();
  for (size_t i = 0; i < in.examples.size(); ++i) {
    const ChoiceExample& ex = in.examples[i];
    std::fill(x.begin(), x.end(), in.tok->eos_id());
    std::fill(y.begin(), y.end(), in.tok->eos_id());
    for (size_t e = 0; e < ex.endings.size(); ++e) {
      const ChoiceRow r = choice_row(ex, e);
      std::copy(r.inputs.begin(), r.inputs.end(), x.begin() + static_cast<std::ptrdiff_t>(e * T));
      std::copy(r.targets.begin(), r.targets.end(), y.begin() + static_cast<std::ptrdiff_t>(e * T));
    }
    gpt2_forward(*be, model, arena.acts(), x.data(), y.data());
    be->memory().download(losses.data(), arena.acts().losses.data, losses.size() * sizeof(float));
    std::vector<std::vector<float>> per_ending;
    for (size_t e = 0; e < ex.endings.size(); ++e) {
      per_ending.emplace_back(losses.begin() + static_cast<std::ptrdiff_t>(e * T),
                              losses.begin() + static_cast<std::ptrdiff_t>((e + 1) * T));
    }
    const ChoiceScore s = score_choices(ex, per_ending);
    correct += s.pred == ex.label;
    correct_norm += s.pred_norm == ex.label;
    if (req.details) {
      details.push_back(Json{{"label", ex.label}, {"pred", s.pred}, {"pred_norm", s.pred_norm},
                             {"sum_loss", s.sum_loss}, {"mean_loss", s.mean_loss}});
    }
    const size_t n = in.examples.size();
    if (n >= 20 && (i + 1) % (n / 10) == 0) {
      console::err(fmt::format("[{}] multiple choice: {} of {} examples, acc_norm so far {:.4f} ({:.1f} s)\n",
                               ctx.stage, i + 1, n, static_cast<double>(correct_norm) / static_cast<double>(i + 1),
                               seconds_since(t0)));
    }
  }
  const double n = static_cast<double>(in.examples.size());
  Json out{{"file", req.hellaswag}, {"examples", in.examples.size()}, {"acc", correct / n},
           {"acc_norm", correct_norm / n}, {"correct", correct}, {"correct_norm", correct_norm},
           {"seconds", round_fixed(seconds_since(t0), 3)}};
  if (req.details) out["details"] = details;
  return out;
}

}  // namespace

void run_evaluate(const EvaluateRequest& req, const StageContext& ctx) {
  std::unique_ptr<Communicator> local;
  Communicator& comm = ctx.comm ? *ctx.comm : *(local = make_local_communicator());
  if (req.model.empty()) {
    throw std::invalid_argument("--model: the model to evaluate is required (our checkpoint, llm.c's model file or "
                                "a Hugging Face GPT-2 folder)");
  }
  if (req.data.empty() && req.hellaswag.empty()) {
    throw std::invalid_argument("evaluate: give --data (a shard folder or a text file), --hellaswag FILE, or both");
  }
  const bool shards = !req.data.empty() && fs::is_directory(req.data);
  if (!req.split.empty() && (!shards || (req.split != "val" && req.split != "train"))) {
    throw std::invalid_argument(shards ? fmt::format("--split: '{}' is not val or train", req.split)
                                       : "--split: only with --data naming a shard folder (a text file is read whole)");
  }
  if (req.batches < 0) throw std::invalid_argument(fmt::format("--batches: {} is not a count", req.batches));
  RunConfig c = req.config;
  // The data section: --data's shards or text (read whole); no training, no validation split.
  c.data.shards = shards ? req.data : "";
  c.data.corpus = shards ? "" : req.data;
  c.data.val_fraction = 0;
  c.train.eval_every = 0;
  c.train.init_from.clear();
  if (shards) c.data.tokenizer = TokenizerKind::kGpt2;  // shards hold GPT-2's ids
  {  // the user's keys, before the model is read; what depends on the model's sizes is checked again below
    RunConfig first = c;
    first.model.T = std::max(first.model.T, first.train.seq_len);
    validate(first);
  }
  const EvaluateInputs in = read_evaluate_inputs(req, c, comm);
  if (shards && c.data.tokenizer != TokenizerKind::kGpt2) {
    throw std::invalid_argument(fmt::format("--data: '{}' holds GPT-2 BPE ids, but --model '{}' keeps a {} tokenizer",
                                            req.data, req.model, to_string(c.data.tokenizer)));
  }
  const int threads = resolve_threads(c.train.threads);
  Json result{{"model", req.model}, {"format", comm.rank() == 0 ? in.weights->format : ""}};
  if (req.data.empty()) c.train.seq_len = c.model.T;  // no batches: the multiple choice's rows are its own
  validate(c);
  if (!req.data.empty()) {
    const RunLayout run = resolve_run(c, comm.size(), ctx.stage);  // every refusal a run of this layout gives
    const RunConfig& rc = run.config;
    check_ranks_agree(rc, comm);
    ProcessGrid grid(comm, rc.parallel.tp, rc.parallel.pp, rc.parallel.cp);
    const GivenModel given{in.tok ? &*in.tok : nullptr, in.weights ? &*in.weights : nullptr, "--model", req.model};
    const std::unique_ptr<RunState> st = init_or_resume(rc, "", ctx.backend, threads, 0, grid, given);
    const bool val = shards && req.split != "train";
    const TokenStream& stream = val ? st->data.split.val : st->data.split.train;
    const int64_t batch_tokens = int64_t{rc.train.batch_size} * rc.train.seq_len;
    const int64_t whole = stream.size() > 0 ? (stream.size() - 1) / batch_tokens : 0;
    const std::string what = shards ? fmt::format("--data '{}' ({} split, {} tokens)", req.data, val ? "val" : "train",
                                                  stream.size())
                                    : fmt::format("--data '{}' ({} tokens)", req.data, stream.size());
    if (whole == 0 || req.batches > whole) {
      throw std::invalid_argument(fmt::format("{}: holds {} whole batches of train.batch_size x train.seq_len = {} x "
                                              "{} (+1) tokens{}", what, whole, rc.train.batch_size, rc.train.seq_len,
                                              req.batches > whole ? fmt::format(", not --batches {}", req.batches) : ""));
    }
    const int64_t batches = req.batches > 0 ? req.batches : whole;
    if (batches > INT32_MAX) {
      throw std::invalid_argument(fmt::format("{}: {} batches are more than one evaluation counts ({}); give --batches",
                                              what, batches, INT32_MAX));
    }
    const std::unique_ptr<Layout> lay = make_layout(run.steps, run.step, *st, grid, 0.0, "");
    StepFeed feed(run, grid);
    DataLoader loader(stream, rc.train.batch_size, rc.train.seq_len, LoaderKind::kSequential, rc.train.seed,
                      grid.replica() * st->rows, st->rows);
    const auto t0 = Clock::now();
    int64_t served = 0;
    const double loss = evaluate(*lay->step, static_cast<int>(batches), feed.inputs(), feed.targets(), [&](int32_t*,
                                                                                                          int32_t*) {
      loader.next(feed.x(), feed.y());
      feed.cut();
      if (comm.rank() == 0 && batches >= 20 && ++served % (batches / 10) == 0) {
        console::err(fmt::format("[{}] evaluate: batch {} of {} ({:.1f} s)\n", ctx.stage, served, batches,
                                 seconds_since(t0)));
      }
    });
    result["data"] = req.data;
    if (shards) result["split"] = val ? "val" : "train";
    result["batches"] = batches;
    result["tokens"] = batches * batch_tokens;
    result["loss"] = loss;
    result["perplexity"] = std::exp(loss);
    result["seconds"] = round_fixed(seconds_since(t0), 3);
    result["layout"] = run.describe();
  }
  if (!req.hellaswag.empty() && comm.rank() == 0) result["hellaswag"] = score_multiple_choice(req, c, in, ctx, threads);
  if (comm.rank() == 0) {
    fmt::print("{}\n", json_text(result));
    std::fflush(stdout);
  }
  comm.barrier();
}

}  // namespace gpt2
