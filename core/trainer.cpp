#include "trainer.h"

#include <fmt/format.h>

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
#include "dataloader.h"
#include "flops.h"
#include "generate.h"
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

void write_atomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp);
    f << text;
    if (!f.flush()) throw std::runtime_error(fmt::format("{}: write failed", tmp.string()));
  }
  fs::rename(tmp, path);
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

// Mean loss over `batches` batches of a validation loader (restarted each time).
double evaluate(Backend& be, const Gpt2& model, ActivationArena& arena, std::span<const int32_t> val,
                const RunConfig& c, std::vector<int32_t>& x, std::vector<int32_t>& y) {
  DataLoader loader(val, c.batch_size, c.seq_len, LoaderKind::kSequential, c.seed);
  double sum = 0;
  for (int i = 0; i < c.eval_batches; ++i) {
    loader.next(x.data(), y.data());
    sum += gpt2_forward(be, model, arena.acts(), x.data(), y.data());
  }
  return sum / c.eval_batches;
}

}  // namespace

void run_train(const TrainRequest& req, const StageContext& ctx) {
  const RunConfig& c = req.config;
  validate(c);
  const int threads = resolve_threads(c.threads);

  // Data: the corpus, its tokenizer (the checkpoint's when resuming), the splits.
  const std::string text = read_corpus(c.corpus);
  std::optional<Checkpoint> ckpt;
  if (!req.resume.empty()) {
    ckpt = load_checkpoint(req.resume);
    if (!ckpt->training) {
      throw std::invalid_argument(fmt::format("--resume: '{}' is a model checkpoint without training state",
                                              req.resume));
    }
  }
  const TokenizerKind kind = parse_tokenizer_kind(c.tokenizer);
  if (ckpt && ckpt->tokenizer.kind() != kind) {
    throw std::invalid_argument(fmt::format("{}: checkpoint tokenizer is '{}', but data.tokenizer says '{}'",
                                            req.resume, to_string(ckpt->tokenizer.kind()), c.tokenizer));
  }
  const Tokenizer tok = ckpt ? ckpt->tokenizer : Tokenizer::build(kind, text);
  const std::vector<int32_t> tokens = tokenize_corpus(tok, text, c.corpus);
  const Gpt2Config mc = c.model_config(tok.size());
  const Split split = split_tokens(tokens, c.val_fraction);
  std::optional<DataLoader> train_loader;
  try {
    train_loader.emplace(split.train, c.batch_size, c.seq_len, parse_loader_kind(c.loader), c.seed);
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

  // Model and optimizer: fresh, or restored from the checkpoint.
  auto be = ctx.make_backend(threads);
  Gpt2 model(mc);
  Optimizer opt(c.optimizer_config(), model.num_params());
  if (ckpt) {
    expect_same_config(*ckpt, mc, req.resume);
    expect_same_optimizer(ckpt->training->optimizer, opt.config(), req.resume);
    if (ckpt->training->steps_done >= c.steps) {
      throw std::invalid_argument(fmt::format("{}: checkpoint is already at step {}, train.steps is {}",
                                              req.resume, ckpt->training->steps_done, c.steps));
    }
    load_params(*ckpt, model);
    std::copy(ckpt->training->m.begin(), ckpt->training->m.end(), opt.m_data());
    std::copy(ckpt->training->v.begin(), ckpt->training->v.end(), opt.v_data());
    opt.set_steps_done(ckpt->training->steps_done);
    loader.restore(ckpt->training->loader_position, ckpt->training->loader_batches);
  } else {
    model.init_weights(c.seed);
  }
  const int64_t first_step = opt.steps_done();
  ckpt.reset();

  // Outputs: checked before any work is done.
  const fs::path out = req.out_dir;
  prepare_out_dir(out, req.overwrite, !req.resume.empty());
  RunConfig resolved = c;
  resolved.vocab_size = mc.V;
  write_atomically(out / "config.yaml", to_yaml(resolved));
  MetricsWriter metrics((out / "metrics.jsonl").string(), req.resume.empty() ? -1 : first_step);
  const std::string ckpt_path = (out / "checkpoint.bin").string();

  const MachineInfo machine = machine_info();
  const BuildInfo build = build_info();
  const double peak = c.peak_gflops > 0 ? c.peak_gflops : sgemm_ceiling_gflops(threads, 1024, 3);
  const FlopCount flops = training_flops(mc, c.batch_size, c.seq_len);
  fmt::print(stderr, "[{}] model {} ({} parameters), {} tokens ({} train, {} val), vocabulary {}\n", ctx.stage,
             mc.describe(), model.num_params(), tokens.size(), split.train.size(), split.val.size(), tok.size());
  fmt::print(stderr, "[{}] {} backend, {} threads, batch {} x {}, {} steps from step {}, MFU peak {:.1f} GFLOP/s{}\n",
             ctx.stage, be->name(), threads, c.batch_size, c.seq_len, c.steps, first_step, peak,
             c.peak_gflops > 0 ? "" : " (measured SGEMM)");

  ActivationArena arena(mc, c.batch_size, c.seq_len);
  const int BT = c.batch_size * c.seq_len;
  std::vector<int32_t> x(static_cast<size_t>(BT)), y(static_cast<size_t>(BT));
  auto save = [&] {
    TrainingState st;
    st.loader_position = loader.position();
    st.loader_batches = loader.batches_served();
    st.seed = c.seed;
    save_checkpoint(ckpt_path, model, tok, &opt, &st);
  };

  double train_s = 0, last_loss = 0;
  const auto wall0 = Clock::now();
  for (int64_t s = first_step; s < c.steps; ++s) {
    const auto t0 = Clock::now();
    loader.next(x.data(), y.data());
    model.zero_grad();
    const float loss = gpt2_forward(*be, model, arena.acts(), x.data(), y.data());
    if (!std::isfinite(loss)) {
      throw std::runtime_error(fmt::format("step {}: the loss is {} (training diverged)", s, loss));
    }
    gpt2_backward(*be, model, arena.acts(), x.data(), y.data(), 1.0f / static_cast<float>(BT));
    const StepStats st = opt.step(*be, model);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    train_s += dt;
    last_loss = loss;
    StepRecord r{s, loss, st.lr, st.grad_norm, dt * 1e3, BT / dt, flops.total() / dt, flops.total() / dt / (peak * 1e9)};
    metrics.step(r);
    fmt::print(stderr, "step {:>4}/{} | loss {:.6f} | lr {:.3e} | norm {:.4f} | {:.0f} ms | {:.0f} tok/s | MFU {:.1f}%\n",
               s, c.steps, loss, st.lr, st.grad_norm, r.step_ms, r.tokens_per_s, 100 * r.mfu);
    if (eval_on && ((s + 1) % c.eval_every == 0 || s + 1 == c.steps)) {
      const double vl = evaluate(*be, model, arena, split.val, c, x, y);
      metrics.eval(s, vl);
      fmt::print(stderr, "step {:>4}/{} | val loss {:.6f}\n", s, c.steps, vl);
    }
    if (c.checkpoint_every > 0 && (s + 1) % c.checkpoint_every == 0) save();
  }
  const double wall_s = std::chrono::duration<double>(Clock::now() - wall0).count();
  save();

  // Inference as in the original: greedy continuation of the first corpus tokens.
  const size_t np = std::min<size_t>(static_cast<size_t>(c.prompt_tokens), tokens.size());
  const auto g0 = Clock::now();
  const Generation gen = generate(*be, model, {tokens.data(), np}, generate_options(c), tok.eos_id());
  const double inference_s = std::chrono::duration<double>(Clock::now() - g0).count();
  const std::string generated = tok.decode(gen.tokens);
  fmt::print(stderr, "[{}] trained {} steps in {:.2f} s ({:.2f} s wall); generated {} tokens in {:.3f} s\n", ctx.stage,
             c.steps - first_step, train_s, wall_s, gen.tokens.size(), inference_s);
  fmt::print("{}\n", generated);

  const std::string extra = fmt::format(
      "\"stage\": {}, \"backend\": {}, \"threads\": {}, \"ranks\": 1, \"seed\": {}, \"config_file\": {}, "
      "\"peak_gflops\": {:.2f}, \"peak_source\": {}",
      json_string(ctx.stage), json_string(be->name()), threads, c.seed, json_string(req.config_file), peak,
      json_string(c.peak_gflops > 0 ? "train.peak_gflops" : "measured SGEMM"));
  metrics.finish(fmt::format(
      "\"status\": \"ok\", \"steps\": {}, \"first_step\": {}, \"train_s\": {:.6f}, \"train_wall_s\": {:.6f}, "
      "\"inference_s\": {:.6f}, \"final_loss\": {:.7g}, \"tokens_per_s\": {:.1f}, \"peak_rss_mb\": {:.1f}, "
      "\"generated_tokens\": {}, \"generated_text\": {}, \"checkpoint\": {}, \"provenance\": {}",
      c.steps, first_step, train_s, wall_s, inference_s, last_loss,
      train_s > 0 ? (c.steps - first_step) * BT / train_s : 0.0, peak_rss_mb(), gen.tokens.size(),
      json_string(generated), json_string(ckpt_path), provenance_json(machine, build, extra)));
}

void run_generate(const GenerateRequest& req, const StageContext& ctx) {
  const RunConfig& c = req.config;
  validate(c);
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
  auto be = ctx.make_backend(resolve_threads(c.threads));
  Gpt2 model(ck.config);
  load_params(ck, model);
  const auto g0 = Clock::now();
  const Generation gen = generate(*be, model, prompt, generate_options(c), ck.tokenizer.eos_id());
  const double s = std::chrono::duration<double>(Clock::now() - g0).count();
  fmt::print(stderr, "[{}] prompt of {} tokens; generated {} tokens in {:.3f} s{}\n", ctx.stage, prompt.size(),
             gen.tokens.size(), s, gen.stopped_at_eos ? " (stopped at [EOS])" : "");
  fmt::print("{}\n", ck.tokenizer.decode(gen.tokens));
}

}  // namespace gpt2
