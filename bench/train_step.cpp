// train_step: the training-step benchmark. Trains the original configuration
// (or another preset) for a few steps on random tokens with the one training
// step of the engine (train/schedule/train_step.h) and reports, per thread count, the
// median step time, tokens/s, achieved GFLOP/s (model/flops.h) and that rate
// as a fraction of the SGEMM ceiling measured in the same run.
// A benchmark, not a test: nothing here asserts a time.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/cli.h"
#include "kernels/backend.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/omp_wait.h"
#include "model/activations.h"
#include "model/flops.h"
#include "model/optim.h"
#include "model/params.h"
#include "model/tokenizer.h"
#include "train/formats/checkpoint.h"
#include "train/resolve/layout.h"
#include "train/schedule/train_step.h"
#include "util/files.h"
#include "util/provenance.h"
#include "util/stats.h"

namespace {

struct Options {
  std::string preset = "original";
  int batch = 16;
  int seq = 0;  // 0: the preset's block size
  std::vector<int> threads = {1, 2};
  int steps = 5;
  int warmup = 1;
  std::string json;
  std::string save_init;
  std::string precision = "fp32";
  std::string stored = "auto";
  bool deterministic = false;
  std::vector<std::string> gemm = {"auto"};

  gpt2::Fields fields() {
    gpt2::Fields f;
    f.add("preset", preset, "model preset: original | small");
    f.add("batch", batch, "batch rows per step");
    f.add("seq", seq, "sequence length, <= block size; 0 = the block size");
    f.add("threads", threads, "comma-separated thread counts to measure");
    f.add("steps", steps, "timed steps per thread count; the median is reported");
    f.add("warmup", warmup, "untimed steps first");
    f.add("precision", precision, "fp32 | bf16 (matrix products with bf16 inputs through oneDNN, as train.precision)");
    f.add("stored", stored,
          "the stored activations' type: auto (bf16 with --precision bf16, as training) | f32 | bf16 (for a "
          "before/after comparison)");
    f.add("deterministic", deterministic, "as train.deterministic: every sum in a canonical order");
    f.add("gemm", gemm,
          "comma-separated train.gemm settings (auto | openblas | onednn) measured side by side: each timed step "
          "runs every setting once in turn");
    f.add("json", json, "also write the results as JSON to this path", "path");
    f.add("save-init", save_init,
          "write the initial weights (seed 1) as a checkpoint, for the PyTorch peer (bench/peers), and exit", "path");
    return f;
  }
};

const char* kHelp =
    "train_step: benchmark one GPT-2 training step (forward, backward, Adam) on the CPU.\n\n"
    "usage: train_step [--OPTION VALUE ...]\n";
const char* kHelpTail =
    "\nThe SGEMM ceiling is a 2048^3 SGEMM with OpenBLAS's own threads, median of 5.\n"
    "For the machine's full speed unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE in\n"
    "this one command; the report names the BLAS kernel that ran.\n";

// --json checked before the benchmark runs (minutes of it): bad input, exit 2,
// not a failure to write once it is done. util/files.h's check_output (its
// folder exists and is writable; not a folder, not inside a training run's
// folder or one another process holds); an existing file is replaced, as it
// always was (scripts write the same file run after run).
void check_json_path(const std::string& json) {
  gpt2::OutputRules rules;
  rules.option = "--json";
  rules.overwrite = true;
  gpt2::check_output(json, rules);
}

int run(int argc, char** argv) {
  using namespace gpt2;
  Options o;
  const Fields fields = o.fields();
  const std::string defaults = fields.help();
  const CommandLine cl = parse_command_line({argv + 1, argv + argc}, fields);
  if (cl.help) {
    fmt::print("{}{}{}", kHelp, defaults, kHelpTail);
    return 0;
  }
  if (!cl.positional.empty()) throw std::invalid_argument(fmt::format("unexpected argument '{}'", cl.positional[0]));
  apply_settings(fields, cl);
  if (o.batch <= 0 || o.steps <= 0 || o.seq < 0 || o.warmup < 0) {
    throw std::invalid_argument("--batch and --steps must be positive, --seq and --warmup >= 0");
  }
  if (o.precision != "fp32" && o.precision != "bf16") {
    throw std::invalid_argument(fmt::format("--precision: '{}' (expected fp32 or bf16)", o.precision));
  }
  const bool bf16 = o.precision == "bf16";
  if (o.stored != "auto" && o.stored != "f32" && o.stored != "bf16") {
    throw std::invalid_argument(fmt::format("--stored: '{}' (expected auto, f32 or bf16)", o.stored));
  }
  if (o.stored == "bf16" && !bf16) throw std::invalid_argument("--stored bf16 needs --precision bf16");
  const Dtype stored = o.stored == "bf16" || (o.stored == "auto" && bf16) ? Dtype::bf16 : Dtype::f32;
  for (int t : o.threads) {
    if (t <= 0) throw std::invalid_argument(fmt::format("--threads: expected positive thread counts, got {}", t));
    check_threads(t, "--threads");  // at most max_threads() (train/config/threads.h)
  }
  if (!o.json.empty() && o.save_init.empty()) check_json_path(o.json);
  const Gpt2Config cfg = preset(o.preset);
  const int B = o.batch, T = o.seq > 0 ? o.seq : cfg.T;
  if (T > cfg.T) throw std::invalid_argument(fmt::format("--seq {} exceeds block size {}", T, cfg.T));
  if (!o.save_init.empty()) {
    Gpt2 model(cfg);
    model.init_weights(1);
    std::vector<std::string> vocab;  // placeholder entries: the peer needs only the weights
    for (int i = 0; i + 1 < cfg.V; ++i) vocab.push_back(fmt::format("t{}", i));
    vocab.push_back(kEosToken);
    save_checkpoint(o.save_init, model, Tokenizer::from_vocab(TokenizerKind::kWord, vocab));
    return 0;
  }
  const MachineInfo mi = machine_info();
  const std::string blas = cpu::blas_core();
  const FlopCount flops = training_flops(cfg, B, T);
  fmt::print("{}BLAS: OpenBLAS kernel '{}' (OPENBLAS_CORETYPE={})\nmodel: {} ({} parameters), B={} T={}, {:.2f} "
             "GFLOP per step\n\n",
             describe(mi), blas, mi.openblas_coretype_env, cfg.describe(), param_count(cfg), B, T,
             flops.total() / 1e9);

  std::mt19937 gen(1);
  std::uniform_int_distribution<int32_t> tok(0, cfg.V - 1);
  std::vector<int32_t> data(static_cast<size_t>(B * T + 1));
  for (int32_t& t : data) t = tok(gen);

  std::vector<GemmChoice> gemms;
  for (const std::string& g : o.gemm) from_string(g, gemms.emplace_back());
  if (gemms.empty()) throw std::invalid_argument("--gemm: give at least one setting");

  Json results = Json::array();
  fmt::print("{:>7} {:>9} {:>10} {:>10} {:>10} {:>10} {:>12} {:>9}\n", "threads", "gemm", "median ms", "min ms",
             "max ms", "tokens/s", "GFLOP/s", "of best");
  for (int th : o.threads) {
    // The MFU peak as runs take it: the better of the two providers' ceilings.
    const double openblas_ceiling = cpu::sgemm_ceiling_gflops(th);
    const double onednn_ceiling = cpu::onednn_sgemm_ceiling_gflops(th);
    const double ceiling = std::max(openblas_ceiling, onednn_ceiling);
    // One engine per --gemm setting, stepped in turn so that they see the same machine.
    struct Engine {
      std::unique_ptr<Backend> be;
      std::unique_ptr<Gpt2> model;
      std::unique_ptr<ActivationArena> arena;
      std::unique_ptr<Optimizer> opt;
      std::unique_ptr<LocalTrainStep> step;
      std::vector<double> ms;
    };
    std::vector<Engine> engines(gemms.size());
    for (size_t i = 0; i < gemms.size(); ++i) {
      Engine& e = engines[i];
      // --deterministic as a run makes it: the canonical column tiles and pieces (model/tensor_parallel.h).
      RunConfig as_run;  // the settings a run with these options would have: its backend and tp pieces
      as_run.train.precision = bf16 ? Precision::kBf16 : Precision::kFp32;
      as_run.train.deterministic = o.deterministic;
      as_run.train.gemm = gemms[i];
      e.be = cpu_backend_kind().make(backend_options(as_run, cfg, th, 0));
      if (th == o.threads.front() && i == 0) {
        fmt::print("backend: {}; stored activations {}\n", e.be->name(), to_string(stored));
      }
      TpPlace layout;
      layout.pieces = deterministic_pieces(cfg, 1, *e.be);
      e.model = std::make_unique<Gpt2>(cfg, host_memory(), layout);
      e.model->init_weights(1);
      e.arena = std::make_unique<ActivationArena>(cfg, ArenaSpec(B, T).with_stored(stored));
      UpdateScope scope;
      scope.exact_norm = o.deterministic;
      e.opt = std::make_unique<Optimizer>(OptimizerConfig::original(), e.model->num_params(), host_memory(), scope);
      e.step = std::make_unique<LocalTrainStep>(*e.be, *e.model, *e.opt, e.arena->acts());
    }
    for (int s = 0; s < o.warmup + o.steps; ++s) {
      for (Engine& e : engines) {
        const auto t0 = std::chrono::steady_clock::now();
        (*e.step)(data.data(), data.data() + 1);
        const double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (s >= o.warmup) e.ms.push_back(dt);
      }
    }
    for (size_t i = 0; i < gemms.size(); ++i) {
      const Engine& e = engines[i];
      const Summary st = *summarize(e.ms);
      const double tokens_per_s = B * T / (st.median / 1e3), gflops = flops.total() / (st.median / 1e3) / 1e9;
      fmt::print("{:>7} {:>9} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.0f} {:>12.1f} {:>8.1f}%\n", th,
                 to_string(gemms[i]), st.median, st.min, st.max, tokens_per_s, gflops, 100 * gflops / ceiling);
      Json choices = Json::object();  // the provider of each timed shape (auto)
      if (const auto* cpu_be = dynamic_cast<const cpu::CpuBackend*>(e.be.get())) {
        for (const cpu::GemmDecision& d : cpu_be->gemm().decisions()) {
          choices[d.shape.text()] = cpu::to_string(d.provider);
        }
      }
      results.push_back(Json{{"threads", th},
                             {"gemm", to_string(gemms[i])},
                             {"median_ms", round_fixed(st.median, 3)},
                             {"min_ms", round_fixed(st.min, 3)},
                             {"max_ms", round_fixed(st.max, 3)},
                             {"tokens_per_s", round_fixed(tokens_per_s, 1)},
                             {"gflops", round_fixed(gflops, 2)},
                             {"sgemm_ceiling_gflops", round_fixed(openblas_ceiling, 2)},
                             {"onednn_ceiling_gflops", round_fixed(onednn_ceiling, 2)},
                             {"fraction_of_best_ceiling", round_fixed(gflops / ceiling, 4)},
                             {"precision", o.precision},
                             {"stored_activations", to_string(stored)},
                             {"deterministic", o.deterministic},
                             {"arena_bytes", e.arena->bytes()},
                             {"backend", e.be->name()},
                             {"gemm_choices", choices}});
    }
    fmt::print("{:>7} ceilings: OpenBLAS SGEMM {:.1f} GFLOP/s, oneDNN fp32 matmul {:.1f} GFLOP/s\n", th,
               openblas_ceiling, onednn_ceiling);
  }
  if (!o.json.empty()) {
    const Json out{{"cpu", mi.cpu_model},
                   {"cores", mi.logical_cores},
                   {"blas_core", blas},
                   {"openblas_coretype", mi.openblas_coretype_env},
                   {"omp_wait_policy", cpu::omp_wait_policy()},
                   {"date", mi.date_utc},
                   {"git_commit", build_info().git_commit},
                   {"source_hash", build_info().source_hash},
                   {"build_options", build_info().build_options},
                   {"openblas", build_info().openblas_version},
                   {"model", o.preset},
                   {"B", B},
                   {"T", T},
                   {"flops_per_step", flops.total()},
                   {"results", results}};
    write_file_atomically(o.json, json_text(out, 2) + "\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return gpt2::tool_main("train_step", run, argc, argv); }
