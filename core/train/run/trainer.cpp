#include "train/run/trainer.h"

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
#include "train/formats/checkpoint.h"
#include "train/formats/checkpoint_store.h"
#include "train/run/checkpoint_writer.h"
#include "train/data/corpus.h"
#include "train/run/mfu_peak.h"
#include "train/formats/model_source.h"
#include "train/resolve/layout.h"
#include "train/schedule/pipeline.h"
#include "train/resolve/plan.h"
#include "train/schedule/preemption.h"
#include "train/run/run_logger.h"
#include "train/run/run_state.h"
#include "train/schedule/train_step.h"
#include "train/run/announce.h"
#include "train/run/build.h"
#include "train/run/memory.h"
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

// The loss on the first train.eval_batches batches of the validation split,
// over the global batch (every data-parallel replica takes its rows).
double validation_loss(StepFunction& step, const TrainConfig& train, const RunState& st, int replica,
                       StepFeed& feed) {
  DataLoader val(st.data.split.val, train.batch_size, train.seq_len, LoaderKind::kSequential, train.seed,
                 replica * st.rows, st.rows);
  return evaluate(step, train.eval_batches, feed.inputs(), feed.targets(), [&](int32_t*, int32_t*) {
    val.next(feed.x(), feed.y());
    feed.cut();
  });
}

// The original's inference: a continuation of the first generate.prompt_tokens
// corpus tokens (greedy by default), timed; into the summary.
void generate_from_corpus(const GenerateConfig& generate_cfg, RunState& st, const Gpt2& model, RunSummary& sum) {
  // The prompt: the training stream's first tokens.
  std::vector<int32_t> prompt(
      static_cast<size_t>(std::min<int64_t>(generate_cfg.prompt_tokens, st.data.split.train.size())));
  st.data.split.train.read(0, prompt);
  GenerateConfig gen_cfg = generate_cfg;
  gen_cfg.vocab_limit = st.data.tok.size();
  const auto g0 = Clock::now();
  const Generation gen = generate(*st.backend, model, prompt, gen_cfg, st.data.tok.eos_id());
  sum.inference_s = seconds_since(g0);
  sum.generated_tokens = static_cast<int64_t>(gen.tokens.size());
  sum.generated_text = st.data.tok.decode(gen.tokens);
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
  if (generates && !st.homes.params->in_model()) local = st.homes.params->gather(grid.dp_comm().rank() == 0);
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
  if (generates) generate_from_corpus(c.generate, st, whole ? *whole : *st.model, sum);  // inference as in the original
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

namespace {
// The request checked before anything is made, and the run's layout
// (train/resolve/layout.h: every refusal the plan gives, in its order).
RunLayout checked_request(const TrainRequest& req, const ProgramContext& ctx, Communicator& comm) {
  validate(req.config);  // once: resolve_validated takes it from here
  std::vector<int> counts = checked_stage_counts(req.config);
  if (!req.hostfile.empty()) check_placement(read_hostfile(req.hostfile), req.hostfile, comm);
  if (req.overwrite && !req.resume.empty()) {
    throw std::invalid_argument("--overwrite and --resume together: --resume continues the directory's run, "
                                "--overwrite discards it; give one");
  }
  return resolve_validated(req.config, std::move(counts), comm.size(), ctx.program);
}
}  // namespace

// `--resume auto` made a path or a fresh start (run_dir.h resolve_auto_resume),
// decided by rank 0 from what the folder holds and sent to every rank, so
// that all resume or all start afresh (a refusal is every rank's, exit 2).
// Returns the log's note ("" when the request did not say auto) and whether
// the run is finished already (nothing to do).
std::pair<std::string, bool> resolve_auto(TrainRequest& req, Communicator& comm) {
  if (req.resume != "auto") return {"", false};
  std::vector<std::string> d;  // refused ("1") or not, replace ("1") or not, the checkpoint, the note or refusal,
                               // finished ("1") or not
  if (comm.rank() == 0) {
    try {
      const AutoResume r = resolve_auto_resume(req.out_dir);
      // A requeued job whose run had finished: nothing to do, and a success.
      const bool finished = r.step >= req.config.train.steps && finished_checkpoint(r.checkpoint, req.config);
      const std::string note = !finished ? r.note
                                         : fmt::format(
                                               "--resume auto: the run in '{}' is finished ({} is after step "
                                               "{}, train.steps {}): nothing to do",
                                               req.out_dir, r.checkpoint, r.step, req.config.train.steps);
      d = {"0", r.replace ? "1" : "0", r.checkpoint, note, finished ? "1" : "0"};
    } catch (const std::invalid_argument& e) {
      d = {"1", "0", "", e.what(), "0"};
    }
  }
  broadcast_strings(comm, d, 0);
  if (d[0] == "1") throw std::invalid_argument(d[3]);
  req.overwrite = d[1] == "1";
  req.resume = d[2];
  return {d[3], d[4] == "1"};
}

// Takes the request's run directory: new, resumed or overwritten (its
// --config file is never taken for one of the run's files), `--resume auto`
// first made a path or a fresh start. False when `--resume auto` found the
// run finished: nothing is claimed or written.
bool claim_run_dir(RunLogger& log, TrainRequest& req, Communicator& comm) {
  const auto [note, finished] = resolve_auto(req, comm);
  if (!note.empty()) log.note(note);
  if (finished) return false;
  std::vector<fs::path> inputs;
  if (!req.config_file.empty()) inputs.push_back(req.config_file);
  log.claim(req.out_dir,
            !req.resume.empty() ? DirIntent::kResume : req.overwrite ? DirIntent::kOverwrite : DirIntent::kNew,
            inputs);
  return true;
}

// The newest checkpoint of this run in its folder: after which step (the
// same on every rank, -1 for none) and its file (rank 0).
struct LastCheckpoint {
  int64_t step = -1;
  std::string file;
};

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

// The loop's checkpoints: the run's writer, saved to like any other
// component, and the newest checkpoint written (a resumed run's own first
// one is already there: a save at that step would only rewrite it).
class Checkpoints {
 public:
  Checkpoints(const RunLayout& run, const std::string& out_dir, Run& r, ProcessGrid& grid, RunLogger& log)
      : run_(run), out_dir_(out_dir), r_(r), grid_(grid), log_(log),
        stored_(already_stored(out_dir, r.state->first_step, grid.world())) {}

  // Writes the checkpoint after `steps` steps (the sink's save) and notes it;
  // returns the state's hash as text (rank 0's is the summary's), or "".
  // `last`: under train.deterministic the state is hashed even when no
  // checkpoint is written, for the bits' comparison.
  std::string save(int64_t steps, bool last) {
    CheckpointWriter& writer = *r_.writer;
    uint64_t hash = 0;
    if (run_.checkpoints.save && stored_.step != steps) {
      Communicator& comm = grid_.world();
      const uint64_t before = rss_bytes();
      reset_peak_rss();
      stored_ = {steps, writer.save(out_dir_, steps, *r_.state, log_.run_id(), grid_, &hash)};
      const std::string peak = per_rank_mb(comm, phase_peak_rss_bytes()), was = per_rank_mb(comm, before);
      const std::string copy =
          writer.last_snapshot_s() > 0 ? fmt::format(", {:.3f} s of it the snapshot", writer.last_snapshot_s()) : "";
      log_.note(fmt::format("checkpoint after step {}: {} ({:.3f} s in the loop{}; resident set per rank before it, "
                            "MB: {}; its peak during it: {})", steps, stored_.file, writer.last_wait_s(), copy, was,
                            peak));
      if (!writer.hashes()) return std::string();  // sharded: no rank holds the whole state to hash
    } else if ((run_.checkpoints.save && writer.hashes()) || (last && run_.step.deterministic())) {
      hash = writer.state_hash(*r_.state, log_.run_id(), grid_);  // written already, or not at all
    } else {
      return std::string();
    }
    return fmt::format("{:016x}", hash);
  }

  // The ranks agreed to stop for a signal after `steps` steps (`abandoned`:
  // the next was under way, and is dropped): the training checkpoint of
  // this state (unless it is the newest already), the record, then
  // RunPreempted on every rank (train/schedule/preemption.h).
  [[noreturn]] void stop(const StopRequest& stop, int64_t steps, bool abandoned) {
    const auto t0 = Clock::now();
    CheckpointWriter& writer = *r_.writer;
    std::string path =
        stored_.step == steps ? stored_.file : writer.save(out_dir_, steps, *r_.state, log_.run_id(), grid_, nullptr);
    writer.finish(grid_, steps);  // an asynchronous save (this one, or the one before) completes before the exit
    if (path.empty()) path = (fs::path(out_dir_) / kCheckpointFile).string();  // the other ranks: its name in the run folder
    const double to_exit = stop.waited_s + seconds_since(t0);
    log_.preempted(steps - 1, signal_name(stop.signal), to_exit, path, abandoned);
    const int64_t total = run_.config.train.steps;
    // In counts of steps done, as the checkpoint's folder is named (step-<steps done>).
    const std::string when = abandoned ? fmt::format("with {} of {} steps done (the next one abandoned)", steps, total)
                                       : fmt::format("after {} of {} steps", steps, total);
    throw RunPreempted(fmt::format("stopped by {} {}, checkpoint {} written; resume with --resume auto",
                                   signal_name(stop.signal), when, path));
  }

  // After step `steps`: the sink's periodic save, then an asynchronous save
  // whose files are all written completes.
  void after_step(int64_t steps) {
    if (run_.checkpoints.periodic(steps)) save(steps, false);
    r_.writer->poll(grid_, steps);
  }

  // The run's last: its hash (RunSummary::state_hash) and, sharded, the folder it wrote.
  void finish(RunSummary& sum) {
    const int64_t steps = run_.config.train.steps;
    sum.state_hash = save(steps, true);
    r_.writer->finish(grid_, steps);
    if (!r_.writer->hashes()) sum.checkpoint = stored_.file;  // a sharded checkpoint's folder (DIR/checkpoint.bin names none)
  }

 private:
  const RunLayout& run_;
  const std::string& out_dir_;
  Run& r_;
  ProcessGrid& grid_;
  RunLogger& log_;
  LastCheckpoint stored_;
};

// What every step's record divides its time into: the global batch's tokens,
// its FLOPs (model/flops.h) and the MFU peak; counted once a run.
struct StepRates {
  double tokens = 0, flops = 0, peak_gflops = 0;
};

// One step of the loop: the batch, the step (stopped inside where the layout
// says so), its record and progress line, validation. Returns the step's
// time (for the stop's agreement).
double train_one_step(int64_t s, const RunLayout& run, Run& r, StepFeed& feed, ProcessGrid& grid, RunLogger& log,
                      Checkpoints& book, RunSummary& sum, const StepRates& rates, const TestHooks& hooks) {
  const TrainConfig& train = run.config.train;
  RunState& st = *r.state;
  StepMachine& m = *r.step;
  const auto t0 = Clock::now();
  if (grid.world().rank() == hooks.fail_rank && s == hooks.fail_step) {
    throw std::runtime_error(
        fmt::format("rank {}: injected failure at step {} (GPT2_TEST_HOOKS fail_rank)", grid.world().rank(), s));
  }
  const int64_t position = st.loader->position(), served = st.loader->batches_served();
  st.loader->next(feed.x(), feed.y());
  feed.cut();
  grid.reset_stats();
  StepResult res;
  try {
    if (m.interrupt) m.interrupt->in_step = true;
    res = m.step->step(feed.inputs(), feed.targets());
    if (m.interrupt) m.interrupt->in_step = false;
  } catch (const StepAbandoned&) {  // a stop signal inside the step: the state after step s - 1
    st.loader->restore(position, served);
    book.stop(m.interrupt->agreed, s, true);
  }
  st.backend->synchronize();  // a device backend's update is still running: count it in this step
  const double dt = seconds_since(t0);
  const double comm_s = res.comm_s + grid.tp_group().seconds() + grid.pp_group().seconds() +
                        grid.dp_group().seconds() + grid.ring().seconds() + (m.pipe ? m.pipe->wait_s() : 0.0);
  sum.train_s += dt;
  sum.comm_s += comm_s;
  sum.final_loss = res.loss;
  StepRecord rec = step_record(s, res, dt, comm_s, grid, m.mem, rates.tokens, rates.flops, rates.peak_gflops);
  if (m.recorder) m.recorder->gather(s, rec);
  log.step(rec, train.steps, grid.world().size() > 1);
  if (st.eval_on && ((s + 1) % train.eval_every == 0 || s + 1 == train.steps)) {
    log.eval({s, validation_loss(*m.step, train, st, grid.replica(), feed)}, train.steps);
  }
  return dt;
}

// The loop: every step left, each followed by the writer's turn and the stop
// signal the ranks agree on; then the run's last checkpoint.
RunSummary train_loop(const RunLayout& run, Run& r, ProcessGrid& grid, RunLogger& log, Checkpoints& book,
                      double peak_gflops, const TestHooks& hooks) {
  const TrainConfig& train = run.config.train;
  StepFeed feed(run, grid);
  const StepRates rates{static_cast<double>(train.batch_size) * train.seq_len,
                        training_flops(r.state->model_config, train.batch_size, train.seq_len).total(), peak_gflops};
  RunSummary sum;
  const auto wall0 = Clock::now();
  for (int64_t s = r.state->first_step; s < train.steps; ++s) {
    const double dt = train_one_step(s, run, r, feed, grid, log, book, sum, rates, hooks);
    book.after_step(s + 1);
    if (hooks.step_sleep_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(hooks.step_sleep_s));
    const StopRequest stop = agreed_stop(grid.aux_comm(), dt);
    if (stop.signal != 0) book.stop(stop, s + 1, false);
    if (r.step->interrupt) r.step->interrupt->arm(stop);
  }
  sum.train_wall_s = seconds_since(wall0);
  book.finish(sum);
  return sum;
}

void run_train(const TrainRequest& given, const ProgramContext& ctx) {
  std::unique_ptr<Communicator> local;
  Communicator& comm = ctx.comm ? *ctx.comm : *(local = make_local_communicator());
  const RunLayout run = checked_request(given, ctx, comm);
  install_stop_handlers();  // a signal from here on stops the run at its next step's end, with a checkpoint
  TrainRequest req = given;
  req.config = run.config;
  const int threads = resolve_threads(run.config.train.threads);
  // Make: the run directory, the grid, the run from its layout.
  RunLogger log(ctx.program, comm.rank() == 0);
  if (!claim_run_dir(log, req, comm)) return;  // --resume auto of a finished run: nothing to do
  if (ctx.hooks.any()) log.note(fmt::format("test hooks installed ({}): {}", kTestHooksVariable, ctx.hooks.describe()));
  check_ranks_agree(run.config, comm);  // before the grid: its split needs every rank's parallel.tp to agree
  ProcessGrid grid(comm, run.tp, run.pp, run.cp);
  const StateSource source = resolve_source(run.config, req.resume);  // --resume auto made a path or nothing above
  const bool resuming = source.kind == StateSource::Kind::kCheckpoint;
  if (resuming) reset_peak_rss();  // the resume's peak, per rank, said below
  Run r = build_run(run, source, ctx.backend, threads, grid, [&log](const std::string& note) { log.note(note); },
                    ctx.hooks);
  const RunState& st = *r.state;
  if (resuming) {
    log.check_resume(req.resume, st.checkpoint_run_id);
    log.note(fmt::format("resumed at step {}: peak resident set while starting (corpus, model, checkpoint read, "
                         "arenas made) per rank, MB: {}", st.first_step, per_rank_mb(comm, phase_peak_rss_bytes())));
  }
  RunConfig resolved = run.config;
  resolved.model = st.model_config;
  log.open(to_yaml(resolved), resuming, st.first_step);  // the folder cleared and taken: now its files are written
  if (r.step->recorder && comm.rank() == 0) r.step->recorder->open(req.out_dir);
  const MfuPeak peak = mfu_peak(run.config, ctx, *r.state, comm, threads);
  log.set_peak_configured(run.config.train.peak_gflops > 0);
  announce(log, run, st, comm, threads, peak, r.max_loss);
  Checkpoints book(run, req.out_dir, r, grid, log);
  RunSummary sum = train_loop(run, r, grid, log, book, peak.gflops, ctx.hooks);
  const Json memory = memory_per_rank(grid, r.step->mem, st.homes.zero.zero_stage);
  const Json provenance =
      comm.rank() == 0 ? run_provenance(req, ctx, st, comm, threads, peak, log.run_id()) : Json::object();
  finish_run(req, *r.state, grid, log, sum, memory, provenance);
}

}  // namespace gpt2
