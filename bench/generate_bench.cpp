// generate_bench: the speed of generation on the CPU backend.
//   * the original's setting: a 256-token prompt (a full window) and 30
//     greedy tokens, by recomputation and with the KV cache (which must
//     re-prefill every token there: the window slides);
//   * a short prompt (--short, default 64) that leaves room in the window,
//     where the KV cache decodes one token at a time;
//   * the same 256-token setting with model.position rope (the only change):
//     keys keep their rotation as the window slides, so the cache drops its
//     oldest row and decodes one token instead of re-prefilling;
//   * each decode step against the time to read the parameters once at the
//     memory bandwidth measured in the same run (a decode step reads every
//     weight once: that is its lower bound).
// Medians over --reps repetitions. A benchmark, not a test.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "app/cli.h"
#include "model/generate.h"
#include "model/params.h"
#include "kernels/cpu/blas.h"
#include "util/provenance.h"
#include "util/fields.h"
#include "util/stats.h"

namespace {

using Clock = std::chrono::steady_clock;

// GB/s of reading a buffer much larger than the caches (sum of its floats).
double read_bandwidth_gbs(size_t bytes, int reps) {
  gpt2::Buffer buf(bytes / sizeof(float));
  for (size_t i = 0; i < buf.size(); ++i) buf.data()[i] = static_cast<float>(i & 7);
  std::vector<double> rates;
  volatile float sink = 0;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = Clock::now();
    float acc = 0;
    const float* p = buf.data();
#pragma omp parallel for simd reduction(+ : acc)
    for (size_t i = 0; i < buf.size(); ++i) acc += p[i];
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    sink = sink + acc;
    if (r > 0) rates.push_back(static_cast<double>(bytes) / s / 1e9);
  }
  return gpt2::median(rates);
}

int run(int argc, char** argv) {
  int threads = 2, reps = 3, short_prompt = 64, new_tokens = 30;
  gpt2::Fields fields;
  fields.add("threads", threads, "CPU threads");
  fields.add("reps", reps, "timed repetitions of each case; the median is reported");
  fields.add("short", short_prompt, "the short prompt's length, leaving room in the window for the KV cache");
  fields.add("tokens", new_tokens, "tokens generated per case");
  const std::string defaults = fields.help();
  const gpt2::CommandLine cl = gpt2::parse_command_line({argv + 1, argv + argc}, fields);
  if (cl.help) {
    fmt::print("generate_bench: generation speed of the original configuration on the CPU backend.\n\n"
               "usage: generate_bench [--OPTION VALUE ...]\n{}", defaults);
    return 0;
  }
  if (!cl.positional.empty()) throw std::invalid_argument(fmt::format("unexpected argument '{}'", cl.positional[0]));
  gpt2::apply_settings(fields, cl);
  for (const auto& [key, value] : cl.settings) {
    if (std::stoi(value) <= 0) throw std::invalid_argument(fmt::format("--{}: expected a positive integer", key));
  }
  using namespace gpt2;
  check_threads(threads, "--threads");  // at most max_threads() (train/config/threads.h)
  const Gpt2Config cfg = preset("original");
  if (short_prompt + new_tokens > cfg.T) throw std::invalid_argument("--short + --tokens must fit in the block (256)");
  auto be = make_cpu_backend(threads);
  Gpt2 model(cfg);
  model.init_weights(1);
  std::mt19937 gen(3);
  std::uniform_int_distribution<int32_t> tok(0, cfg.V - 1);
  std::vector<int32_t> prompt(static_cast<size_t>(cfg.T));
  for (int32_t& t : prompt) t = tok(gen);
  fmt::print("{}BLAS: OpenBLAS kernel '{}'\nmodel: {}, {} threads, {} new tokens, median of {}\n\n",
             describe(machine_info()), cpu::blas_core(), cfg.describe(), threads, new_tokens, reps);

  auto time_it = [&](size_t prompt_len, bool kv) {
    GenerateConfig g;
    g.max_new_tokens = new_tokens;
    g.kv_cache = kv;
    std::vector<double> s;
    for (int r = 0; r < reps + 1; ++r) {
      const auto t0 = Clock::now();
      const Generation out = generate(*be, model, {prompt.data(), prompt_len}, g, -1);
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      if (out.tokens.size() != static_cast<size_t>(new_tokens)) throw std::runtime_error("generation stopped early");
      if (r > 0) s.push_back(dt);
    }
    return gpt2::median(s);
  };
  const double full_re = time_it(cfg.T, false), full_kv = time_it(cfg.T, true);
  const double short_re = time_it(static_cast<size_t>(short_prompt), false);
  const double short_kv = time_it(static_cast<size_t>(short_prompt), true);
  // One decode step: the cache path's time beyond its prefill, per token.
  GenerateConfig one;
  one.max_new_tokens = 1;
  one.kv_cache = true;
  std::vector<double> pre;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = Clock::now();
    generate(*be, model, {prompt.data(), static_cast<size_t>(short_prompt)}, one, -1);
    if (r > 0) pre.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double decode_step = (short_kv - gpt2::median(pre)) / (new_tokens - 1);
  // The original configuration with RoPE positions, same weights' seed and prompt.
  Gpt2Config rope_cfg = cfg;
  rope_cfg.position = PositionKind::kRope;
  Gpt2 rope_model(rope_cfg);
  rope_model.init_weights(1);
  auto time_rope = [&](bool kv) {
    GenerateConfig g;
    g.max_new_tokens = new_tokens;
    g.kv_cache = kv;
    std::vector<double> s;
    std::vector<int32_t> tokens;
    for (int r = 0; r < reps + 1; ++r) {
      const auto t0 = Clock::now();
      const Generation out = generate(*be, rope_model, {prompt.data(), prompt.size()}, g, -1);
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      if (out.tokens.size() != static_cast<size_t>(new_tokens)) throw std::runtime_error("generation stopped early");
      if (r > 0) s.push_back(dt);
      tokens = out.tokens;
    }
    return std::pair{gpt2::median(s), tokens};
  };
  const auto [rope_re, rope_re_tokens] = time_rope(false);
  const auto [rope_kv, rope_kv_tokens] = time_rope(true);
  const double bw = read_bandwidth_gbs(size_t{512} << 20, reps);
  const double param_bytes = static_cast<double>(model.num_params()) * sizeof(float);
  const double read_time = param_bytes / (bw * 1e9);

  fmt::print("{:<58} {:>10}\n", "case", "seconds");
  fmt::print("{:<58} {:>10.3f}\n", fmt::format("{}-token prompt + {} tokens, recompute", cfg.T, new_tokens), full_re);
  fmt::print("{:<58} {:>10.3f}\n", fmt::format("{}-token prompt + {} tokens, KV cache (slides: re-prefills)", cfg.T,
                                               new_tokens), full_kv);
  fmt::print("{:<58} {:>10.3f}\n", fmt::format("{}-token prompt + {} tokens, recompute", short_prompt, new_tokens),
             short_re);
  fmt::print("{:<58} {:>10.3f}   ({:.1f}x faster)\n",
             fmt::format("{}-token prompt + {} tokens, KV cache", short_prompt, new_tokens), short_kv,
             short_re / short_kv);
  fmt::print("{:<58} {:>10.3f}\n", fmt::format("RoPE: {}-token prompt + {} tokens, recompute", cfg.T, new_tokens),
             rope_re);
  fmt::print("{:<58} {:>10.3f}   ({:.1f}x faster; tokens {})\n",
             fmt::format("RoPE: {}-token prompt + {} tokens, KV cache (slides)", cfg.T, new_tokens), rope_kv,
             rope_re / rope_kv, rope_re_tokens == rope_kv_tokens ? "identical" : "DIFFER");
  fmt::print("\none decode step: {:.2f} ms; reading the {:.1f} MB of parameters once at the measured {:.1f} GB/s: "
             "{:.2f} ms; ratio {:.2f}\n",
             decode_step * 1e3, param_bytes / 1e6, bw, read_time * 1e3, decode_step / read_time);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return gpt2::tool_main("generate_bench", run, argc, argv); }
