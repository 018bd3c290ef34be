#include "trainer.h"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <unistd.h>

#include "activations.h"
#include "checkpoint.h"
#include "files.h"
#include "comm.h"
#include "dataloader.h"
#include "flops.h"
#include "generate.h"
#include "hostfile.h"
#include "metrics.h"
#include "model.h"
#include "optim.h"
#include "params.h"
#include "provenance.h"
#include "tokenizer.h"

namespace gpt2 {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string read_corpus(const std::string& path) {
  if (path.empty()) throw std::invalid_argument("data.corpus: no corpus file given");
  std::ifstream f(path, std::ios::binary);
  if (!f || fs::is_directory(path)) {
    throw std::invalid_argument(fmt::format("data.corpus: cannot read '{}': {}", path,
                                            fs::exists(path) ? "not a readable file" : "no such file"));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  if (text.find_first_not_of(" \t\r\n\v\f") == std::string::npos) {
    throw std::invalid_argument(fmt::format("data.corpus: '{}' is empty", path));
  }
  return text;
}

namespace {

int resolve_threads(int threads) {
  return threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// Creates out_dir and checks that it is writable and holds no finished run.
void prepare_out_dir(const fs::path& dir, bool overwrite, bool resuming) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::invalid_argument(fmt::format("--out: cannot create '{}': {}", dir.string(), ec.message()));
  const fs::path probe = dir / ".write-test";
  {
    std::ofstream f(probe);
    if (!f) throw std::invalid_argument(fmt::format("--out: '{}' is not writable", dir.string()));
  }
  fs::remove(probe);
  if (fs::exists(dir / "metrics.jsonl") && !overwrite && !resuming) {
    throw std::invalid_argument(fmt::format(
        "--out: '{}' already holds a finished run (metrics.jsonl); choose another directory or pass --overwrite",
        dir.string()));
  }
}

void expect_same_optimizer(const OptimizerConfig& a, const OptimizerConfig& b, const std::string& path) {
  auto check = [&](const char* key, double x, double y) {
    if (x != y) {
      throw std::invalid_argument(
          fmt::format("{}: checkpoint has optimizer.{} = {}, but the configuration says {}", path, key, x, y));
    }
  };
  if (a.kind != b.kind) {
    throw std::invalid_argument(fmt::format("{}: checkpoint has optimizer.kind = {}, but the configuration says {}",
                                            path, to_string(a.kind), to_string(b.kind)));
  }
  check("lr", a.lr, b.lr);
  check("min_lr", a.min_lr, b.min_lr);
  check("warmup_steps", static_cast<double>(a.warmup_steps), static_cast<double>(b.warmup_steps));
  check("decay_steps", static_cast<double>(a.decay_steps), static_cast<double>(b.decay_steps));
  check("beta1", a.beta1, b.beta1);
  check("beta2", a.beta2, b.beta2);
  check("eps", a.eps, b.eps);
  check("weight_decay", a.weight_decay, b.weight_decay);
  check("grad_clip", a.grad_clip, b.grad_clip);
}

GenerateOptions generate_options(const RunConfig& c) {
  GenerateOptions g;
  g.max_new_tokens = c.max_new_tokens;
  g.kv_cache = c.kv_cache;
  g.temperature = static_cast<float>(c.temperature);
  g.top_k = c.top_k;
  g.seed = c.sample_seed;
  return g;
}

}  // namespace

namespace {

// The corpus as every rank needs it. Rank 0 reads and tokenizes it (with the
// checkpoint's vocabulary when resuming) and broadcasts the result, so only
// rank 0 needs the file.
struct Corpus {
  Tokenizer tok;
  std::vector<int32_t> tokens;
};

Corpus load_corpus(const RunConfig& c, const Checkpoint* ckpt, const std::string& resume, Communicator& comm) {
  Corpus out;
  const TokenizerKind kind = parse_tokenizer_kind(c.tokenizer);
  if (comm.rank() == 0) {
    const std::string text = read_corpus(c.corpus);
    if (ckpt && ckpt->tokenizer.kind() != kind) {
      throw std::invalid_argument(fmt::format("{}: checkpoint tokenizer is '{}', but data.tokenizer says '{}'", resume,
                                              to_string(ckpt->tokenizer.kind()), c.tokenizer));
    }
    out.tok = ckpt ? ckpt->tokenizer : Tokenizer::build(kind, text);
    out.tokens = tokenize_corpus(out.tok, text, c.corpus);
  }
  if (comm.size() > 1) {
    std::vector<std::string> vocab = out.tok.vocab();
    broadcast_strings(comm, vocab, 0);
    broadcast_ints(comm, out.tokens, 0);
    out.tok = Tokenizer::from_vocab(kind, std::move(vocab));
  }
  return out;
}

// Rank 0's checkpoint state (weights, Adam moments, counters) to every rank,
// through host copies (the model may live in device memory).
struct HostState {
  std::vector<float> params, m, v;
  std::array<int64_t, 3> counters{0, 0, 0};  // steps done, loader position, loader batches served
};

void broadcast_state(Communicator& comm, HostState& st, size_t n) {
  for (std::vector<float>* v : {&st.params, &st.m, &st.v}) {
    v->resize(n);
    comm.broadcast(v->data(), n * sizeof(float), 0);
  }
  comm.broadcast(st.counters.data(), sizeof st.counters, 0);
}

}  // namespace

void run_train(const TrainRequest& req, const StageContext& ctx) {
  const RunConfig& c = req.config;
  validate(c);
  std::unique_ptr<Communicator> local;
  Communicator& comm = ctx.comm ? *ctx.comm : *(local = make_local_communicator());
  const int rank = comm.rank(), world = comm.size();
  const bool root = rank == 0;
  const int threads = resolve_threads(c.threads);
  if (c.batch_size % world != 0) {
    throw std::invalid_argument(
        fmt::format("train.batch_size {} is not divisible by the {} ranks", c.batch_size, world));
  }
  const int rows = c.batch_size / world;  // this rank's rows of every global batch
  if (!req.hostfile.empty()) check_placement(read_hostfile(req.hostfile), req.hostfile, comm);

  // Data: rank 0 reads the corpus (and the checkpoint); every rank gets tokens.
  std::optional<Checkpoint> ckpt;
  if (root && !req.resume.empty()) {
    ckpt = load_checkpoint(req.resume);
    if (!ckpt->training) {
      throw std::invalid_argument(fmt::format("--resume: '{}' is a model checkpoint without training state",
                                              req.resume));
    }
  }
  const Corpus corpus = load_corpus(c, ckpt ? &*ckpt : nullptr, req.resume, comm);
  const Tokenizer& tok = corpus.tok;
  const std::vector<int32_t>& tokens = corpus.tokens;
  const Gpt2Config mc = c.model_config(tok.size());
  const Split split = split_tokens(tokens, c.val_fraction);
  std::optional<DataLoader> train_loader;
  try {
    train_loader.emplace(split.train, c.batch_size, c.seq_len, parse_loader_kind(c.loader), c.seed,
                         rank * rows, rows);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("data.corpus '{}': {}", c.corpus, e.what()));
  }
  DataLoader& loader = *train_loader;
  const bool eval_on = c.eval_every > 0 && !split.val.empty();
  if (eval_on) {  // the validation split must hold one batch: fail now, not at the first evaluation
    try {
      DataLoader probe(split.val, c.batch_size, c.seq_len, LoaderKind::kSequential, c.seed);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("data.val_fraction: the validation split is too small: {}", e.what()));
    }
  }

  // Model and optimizer: fresh (every rank computes the same Philox weights),
  // or rank 0's checkpoint broadcast to every rank.
  auto be = ctx.make_backend({threads, c.tf32});
  Gpt2 model(mc, be->memory());
  Optimizer opt(c.optimizer_config(), model.num_params(), be->memory());
  if (!req.resume.empty()) {
    HostState st;
    if (root) {
      expect_same_config(*ckpt, mc, req.resume);
      expect_same_optimizer(ckpt->training->optimizer, opt.config(), req.resume);
      if (ckpt->training->seed != c.seed) {
        throw std::invalid_argument(fmt::format("{}: checkpoint was trained with train.seed = {}, but the "
                                                "configuration says {}", req.resume, ckpt->training->seed, c.seed));
      }
      if (ckpt->training->steps_done >= c.steps) {
        throw std::invalid_argument(fmt::format("{}: checkpoint is already at step {}, train.steps is {}",
                                                req.resume, ckpt->training->steps_done, c.steps));
      }
      st.params = std::move(ckpt->params);
      st.m = std::move(ckpt->training->m);
      st.v = std::move(ckpt->training->v);
      st.counters = {ckpt->training->steps_done, ckpt->training->loader_position, ckpt->training->loader_batches};
      ckpt.reset();
    }
    broadcast_state(comm, st, model.num_params());
    model.params_from_host(st.params);
    opt.moments_from_host(st.m, st.v);
    opt.set_steps_done(st.counters[0]);
    loader.restore(st.counters[1], st.counters[2]);
  } else {
    model.init_weights(c.seed);
  }
  {
    const std::vector<float> w = model.params_to_host();
    if (!comm.all_equal(fnv1a64(w.data(), w.size() * sizeof(float)))) {
      throw std::runtime_error("the initial weights differ across ranks (checksum mismatch)");
    }
  }
  const int64_t first_step = opt.steps_done();

  // Outputs (rank 0): checked before any work is done.
  const fs::path out = req.out_dir;
  std::optional<MetricsWriter> metrics;
  const std::string ckpt_path = (out / "checkpoint.bin").string();
  if (root) {
    prepare_out_dir(out, req.overwrite, !req.resume.empty());
    RunConfig resolved = c;
    resolved.vocab_size = mc.V;
    write_file_atomically(out / "config.yaml", to_yaml(resolved));
    metrics.emplace((out / "metrics.jsonl").string(), req.resume.empty() ? -1 : first_step);
  }

  // The MFU denominator: the SGEMM ceiling of all the job's threads, measured
  // by rank 0 while the others wait idle (one machine; give train.peak_gflops
  // for several).
  double peak = c.peak_gflops;
  if (peak <= 0) {
    if (root) peak = be->ceiling_gflops(world, comm.local_size(), threads);
    comm.broadcast(&peak, sizeof peak, 0);
  }
  const MachineInfo machine = machine_info();
  const BuildInfo build = build_info();
  const FlopCount flops = training_flops(mc, c.batch_size, c.seq_len);
  if (root) {
    fmt::print(stderr, "[{}] model {} ({} parameters), {} tokens ({} train, {} val), vocabulary {}\n", ctx.stage,
               mc.describe(), model.num_params(), tokens.size(), split.train.size(), split.val.size(), tok.size());
    fmt::print(stderr,
               "[{}] {} backend, {} ranks x {} threads, batch {} x {} ({} rows per rank), {} steps from step {}, "
               "MFU peak {:.1f} GFLOP/s{}\n",
               ctx.stage, be->name(), world, threads, c.batch_size, c.seq_len, rows, c.steps, first_step, peak,
               c.peak_gflops > 0 ? "" : " (measured SGEMM)");
  }

  ActivationArena arena(mc, rows, c.seq_len, be->memory());
  const int BT = c.batch_size * c.seq_len;  // global tokens per step
  const float dloss = 1.0f / static_cast<float>(BT);
  std::vector<int32_t> x(static_cast<size_t>(rows) * c.seq_len), y(x.size());
  GradientSync sync(comm, model.grad_data(), model.num_params(),
                    static_cast<size_t>(c.grad_bucket_mb * (1 << 20) / sizeof(float)));
  auto save = [&] {
    if (!root || !c.save_checkpoint) return;
    TrainingState st;
    st.loader_position = loader.position();
    st.loader_batches = loader.batches_served();
    st.seed = c.seed;
    save_checkpoint(ckpt_path, model, tok, &opt, &st);
  };
  // Mean over ranks of a per-rank mean over its rows: the global mean.
  auto global_mean = [&](double local) { return comm.allreduce_sum(local * rows / c.batch_size); };

  double train_s = 0, comm_s = 0, last_loss = 0;
  const auto wall0 = Clock::now();
  for (int64_t s = first_step; s < c.steps; ++s) {
    const auto t0 = Clock::now();
    if (rank == c.fail_rank && s == c.fail_step) {
      throw std::runtime_error(fmt::format("rank {}: injected failure at step {} (debug.fail_rank)", rank, s));
    }
    loader.next(x.data(), y.data());
    model.zero_grad();
    const double local_loss = gpt2_forward(*be, model, arena.acts(), x.data(), y.data());
    sync.start_grad_sync();
    gpt2_backward(*be, model, arena.acts(), x.data(), y.data(), dloss, &sync);
    sync.finish_grad_sync();
    const auto tc = Clock::now();
    const double loss = global_mean(local_loss);
    const double step_comm = sync.seconds() + std::chrono::duration<double>(Clock::now() - tc).count();
    if (!std::isfinite(loss)) {
      throw std::runtime_error(fmt::format("step {}: the loss is {} (training diverged)", s, loss));
    }
    const StepStats st = opt.step(*be, model);
    be->synchronize();  // a device backend's update is still running: count it in this step
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    train_s += dt;
    comm_s += step_comm;
    last_loss = loss;
    if (root) {
      StepRecord r{s, loss, st.lr, st.grad_norm, dt * 1e3, BT / dt, flops.total() / dt,
                   flops.total() / dt / (peak * 1e9), step_comm * 1e3, world > 1 ? sync.bytes() : 0};
      metrics->step(r);
      fmt::print(stderr,
                 "step {:>4}/{} | loss {:.6f} | lr {:.3e} | norm {:.4f} | {:.0f} ms{} | {:.0f} tok/s | MFU {:.1f}%\n",
                 s, c.steps, loss, st.lr, st.grad_norm, r.step_ms,
                 world > 1 ? fmt::format(" (comm {:.0f} ms)", r.comm_ms) : "", r.tokens_per_s, 100 * r.mfu);
    }
    if (eval_on && ((s + 1) % c.eval_every == 0 || s + 1 == c.steps)) {
      DataLoader val(split.val, c.batch_size, c.seq_len, LoaderKind::kSequential, c.seed, rank * rows, rows);
      double sum = 0;
      for (int i = 0; i < c.eval_batches; ++i) {
        val.next(x.data(), y.data());
        sum += gpt2_forward(*be, model, arena.acts(), x.data(), y.data());
      }
      const double vl = global_mean(sum / c.eval_batches);
      if (root) {
        metrics->eval(s, vl);
        fmt::print(stderr, "step {:>4}/{} | val loss {:.6f}\n", s, c.steps, vl);
      }
    }
    if (c.checkpoint_every > 0 && (s + 1) % c.checkpoint_every == 0) save();
  }
  const double wall_s = std::chrono::duration<double>(Clock::now() - wall0).count();
  save();
  if (!root) {
    comm.barrier();  // idle (no spinning) while rank 0 generates
    return;
  }

  // Inference as in the original: greedy continuation of the first corpus tokens.
  const size_t np = std::min<size_t>(static_cast<size_t>(c.prompt_tokens), tokens.size());
  const auto g0 = Clock::now();
  GenerateOptions gopt = generate_options(c);
  gopt.vocab_limit = tok.size();
  const Generation gen = generate(*be, model, {tokens.data(), np}, gopt, tok.eos_id());
  const double inference_s = std::chrono::duration<double>(Clock::now() - g0).count();
  const std::string generated = tok.decode(gen.tokens);
  fmt::print(stderr, "[{}] trained {} steps in {:.2f} s ({:.2f} s wall, {:.2f} s communicating); generated {} tokens "
             "in {:.3f} s\n", ctx.stage, c.steps - first_step, train_s, wall_s, comm_s, gen.tokens.size(), inference_s);
  fmt::print("{}\n", generated);

  const std::string extra = fmt::format(
      "\"stage\": {}, \"backend\": {}, \"communicator\": {}, \"threads\": {}, \"ranks\": {}, \"hostfile\": {}, "
      "\"seed\": {}, \"config_file\": {}, \"peak_gflops\": {:.2f}, \"peak_source\": {}",
      json_string(ctx.stage), json_string(be->name()), json_string(comm.name()), threads, world,
      json_string(req.hostfile), c.seed,
      json_string(req.config_file), peak, json_string(c.peak_gflops > 0 ? "train.peak_gflops" : "measured SGEMM"));
  metrics->finish(fmt::format(
      "\"status\": \"ok\", \"steps\": {}, \"first_step\": {}, \"ranks\": {}, \"train_s\": {:.6f}, "
      "\"train_wall_s\": {:.6f}, \"comm_s\": {:.6f}, \"inference_s\": {:.6f}, \"final_loss\": {:.7g}, "
      "\"tokens_per_s\": {:.1f}, \"peak_rss_mb\": {:.1f}, \"generated_tokens\": {}, \"generated_text\": {}, "
      "\"checkpoint\": {}, \"provenance\": {}",
      c.steps, first_step, world, train_s, wall_s, comm_s, inference_s, last_loss,
      train_s > 0 ? (c.steps - first_step) * BT / train_s : 0.0, peak_rss_mb(), gen.tokens.size(),
      json_string(generated), json_string(c.save_checkpoint ? ckpt_path : ""), provenance_json(machine, build, extra)));
  comm.barrier();
}

void run_generate(const GenerateRequest& req, const StageContext& ctx) {
  const RunConfig& c = req.config;
  validate(c);
  if (ctx.comm && ctx.comm->rank() != 0) {  // generation runs on rank 0; the others wait idle
    ctx.comm->barrier();
    return;
  }
  if (req.checkpoint.empty()) throw std::invalid_argument("--checkpoint: a checkpoint file is required");
  const Checkpoint ck = load_checkpoint(req.checkpoint);
  std::vector<int32_t> prompt;
  if (!req.prompt.empty()) {
    prompt = ck.tokenizer.encode(req.prompt, "--prompt");
  } else {
    const std::string text = read_corpus(c.corpus);
    prompt = tokenize_corpus(ck.tokenizer, text, c.corpus);
    prompt.resize(std::min<size_t>(prompt.size(), static_cast<size_t>(c.prompt_tokens)));
  }
  if (prompt.empty()) throw std::invalid_argument("--prompt: the prompt has no tokens");
  auto be = ctx.make_backend({resolve_threads(c.threads), c.tf32});
  Gpt2 model(ck.config, be->memory());
  load_params(ck, model);
  const auto g0 = Clock::now();
  GenerateOptions gopt = generate_options(c);
  gopt.vocab_limit = ck.tokenizer.size();
  const Generation gen = generate(*be, model, prompt, gopt, ck.tokenizer.eos_id());
  const double s = std::chrono::duration<double>(Clock::now() - g0).count();
  fmt::print(stderr, "[{}] prompt of {} tokens; generated {} tokens in {:.3f} s{}\n", ctx.stage, prompt.size(),
             gen.tokens.size(), s, gen.stopped_at_eos ? " (stopped at [EOS])" : "");
  fmt::print("{}\n", ck.tokenizer.decode(gen.tokens));
  std::fflush(stdout);
  if (ctx.comm) ctx.comm->barrier();
}

}  // namespace gpt2
