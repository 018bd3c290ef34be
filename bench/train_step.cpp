// train_step: the training-step benchmark. Trains the original configuration
// (or another preset) for a few steps on random tokens and reports, per
// thread count, the median step time, tokens/s, achieved GFLOP/s (flops.h)
// and that rate as a fraction of the SGEMM ceiling measured in the same run.
// A benchmark, not a test: nothing here asserts a time.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "activations.h"
#include "backend.h"
#include "checkpoint.h"
#include "cli.h"
#include "flops.h"
#include "model.h"
#include "optim.h"
#include "params.h"
#include "provenance.h"
#include "tokenizer.h"

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
};

const char* kHelp = R"(train_step: benchmark one GPT-2 training step (forward, backward, Adam) on the CPU.

usage: train_step [options]
  --preset NAME     model preset: original | small              (default original)
  --batch B         batch rows per step                         (default 16)
  --seq T           sequence length, <= block size              (default: block size)
  --threads LIST    comma-separated thread counts to measure    (default 1,2)
  --steps N         timed steps per thread count; median taken  (default 5)
  --warmup N        untimed steps first                         (default 1)
  --json PATH       also write the results as JSON to PATH
  --save-init PATH  write the initial weights (seed 1) as a checkpoint, for the
                    PyTorch peer (bench/peers/peer_bench.py), and exit
  --help            this text

The SGEMM ceiling is a 2048^3 SGEMM with OpenBLAS's own threads, median of 5.
For the machine's full speed unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE in
this one command; the report names the BLAS kernel that ran.
)";

int positive_int(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    int x = std::stoi(v, &used);
    if (used == v.size() && x > 0) return x;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(fmt::format("{}: expected a positive integer, got '{}'", flag, v));
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--help" || k == "-h") {
      std::fputs(kHelp, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) throw std::invalid_argument(fmt::format("{}: missing value", k));
    std::string v = argv[++i];
    if (k == "--preset") {
      o.preset = v;
    } else if (k == "--batch") {
      o.batch = positive_int(k, v);
    } else if (k == "--seq") {
      o.seq = positive_int(k, v);
    } else if (k == "--threads") {
      o.threads.clear();
      std::stringstream ss(v);
      for (std::string part; std::getline(ss, part, ',');) o.threads.push_back(positive_int(k, part));
    } else if (k == "--steps") {
      o.steps = positive_int(k, v);
    } else if (k == "--warmup") {
      o.warmup = std::stoi(v);
    } else if (k == "--json") {
      o.json = v;
    } else if (k == "--save-init") {
      o.save_init = v;
    } else {
      throw std::invalid_argument(fmt::format("unknown option '{}' (see --help)", k));
    }
  }
  return o;
}

struct Result {
  int threads;
  double median_ms, min_ms, max_ms, tokens_per_s, gflops, ceiling_gflops;
};

int run(const Options& o) {
  using namespace gpt2;
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
  const FlopCount flops = training_flops(cfg, B, T);
  fmt::print("{}model: {} ({} parameters), B={} T={}, {:.2f} GFLOP per step\n\n", describe(mi),
             cfg.describe(), param_count(cfg), B, T, flops.total() / 1e9);

  std::mt19937 gen(1);
  std::uniform_int_distribution<int32_t> tok(0, cfg.V - 1);
  std::vector<int32_t> data(static_cast<size_t>(B * T + 1));
  for (int32_t& t : data) t = tok(gen);

  std::vector<Result> results;
  fmt::print("{:>7} {:>10} {:>10} {:>10} {:>10} {:>12} {:>9}\n", "threads", "median ms", "min ms",
             "max ms", "tokens/s", "GFLOP/s", "of SGEMM");
  for (int th : o.threads) {
    const double ceiling = sgemm_ceiling_gflops(th);
    auto be = make_cpu_backend(th);
    Gpt2 model(cfg);
    model.init_weights(1);
    ActivationArena arena(cfg, B, T);
    Optimizer opt(OptimizerConfig::original(), model.num_params());
    std::vector<double> ms;
    for (int s = 0; s < o.warmup + o.steps; ++s) {
      auto t0 = std::chrono::steady_clock::now();
      model.zero_grad();
      gpt2_forward(*be, model, arena.acts(), data.data(), data.data() + 1);
      gpt2_backward(*be, model, arena.acts(), data.data(), data.data() + 1, 1.0f / (B * T));
      opt.step(*be, model);
      double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (s >= o.warmup) ms.push_back(dt);
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
    Result r{th, med, ms.front(), ms.back(), B * T / (med / 1e3), flops.total() / (med / 1e3) / 1e9, ceiling};
    results.push_back(r);
    fmt::print("{:>7} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.0f} {:>12.1f} {:>8.1f}%   (SGEMM ceiling {:.1f} GFLOP/s)\n",
               th, r.median_ms, r.min_ms, r.max_ms, r.tokens_per_s, r.gflops, 100 * r.gflops / ceiling,
               ceiling);
  }
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    if (!f) throw std::runtime_error(fmt::format("--json: cannot write '{}'", o.json));
    f << fmt::format(
        "{{\n  \"cpu\": \"{}\", \"cores\": {}, \"blas_core\": \"{}\", \"openblas_coretype\": \"{}\",\n"
        "  \"date\": \"{}\", \"model\": \"{}\", \"B\": {}, \"T\": {}, \"flops_per_step\": {},\n  \"results\": [\n",
        mi.cpu_model, mi.logical_cores, mi.blas_core, mi.openblas_coretype_env, mi.date_utc, o.preset, B, T,
        flops.total());
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      f << fmt::format(
          "    {{\"threads\": {}, \"median_ms\": {:.3f}, \"min_ms\": {:.3f}, \"max_ms\": {:.3f}, "
          "\"tokens_per_s\": {:.1f}, \"gflops\": {:.2f}, \"sgemm_ceiling_gflops\": {:.2f}}}{}\n",
          r.threads, r.median_ms, r.min_ms, r.max_ms, r.tokens_per_s, r.gflops, r.ceiling_gflops,
          i + 1 < results.size() ? "," : "");
    }
    f << "  ]\n}\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt2::tool_main("train_step", [](int c, char** v) { return run(parse(c, v)); }, argc, argv);
}
