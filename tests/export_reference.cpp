// export_reference: runs our engine on a small problem and writes everything
// the PyTorch cross-check (torch_crosscheck.py) compares: initial weights,
// the batches, logits, loss and every gradient of the first batch, then the
// loss of each of `steps` optimizer steps and the final weights.
// Output: DIR/manifest.json (configuration and a table of arrays) and
// DIR/data.bin (the arrays, little-endian float32 / int32, back to back).
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/activations.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "model/optim.h"
#include "model/params.h"
#include "train/schedule/train_step.h"
#include "export_writer.h"
#include "util/fields.h"

namespace {

struct Args {
  std::string preset = "small";
  int batch = 2;
  int seq = 0;  // 0: the preset's block size
  uint64_t seed = 1337;
  std::string optimizer = "adam_original";
  int steps = 10;
  int threads = 2;
  std::string precision = "fp32";  // --precision bf16: bf16 products and stored activations, as train.precision
  std::vector<std::pair<std::string, std::string>> model;  // --model KEY=VALUE: model section keys
  std::string out;
};

const char* kUsage =
    "usage: export_reference --out DIR [--preset small|original] [--batch 2] [--seq T]\n"
    "                        [--seed 1337] [--optimizer adam_original|adamw] [--steps 10] [--threads 2]\n"
    "                        [--model KEY=VALUE ...]  (model keys: arch, norm, position, n_kv_head, ...)\n"
    "                        [--precision fp32|bf16]\n";

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--help" || k == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) throw std::invalid_argument(fmt::format("{} needs a value", k));
    std::string v = argv[++i];
    if (k == "--preset") a.preset = v;
    else if (k == "--batch") a.batch = std::stoi(v);
    else if (k == "--seq") a.seq = std::stoi(v);
    else if (k == "--seed") a.seed = std::stoull(v);
    else if (k == "--optimizer") a.optimizer = v;
    else if (k == "--steps") a.steps = std::stoi(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--out") a.out = v;
    else if (k == "--precision") a.precision = v;
    else if (k == "--model") {
      const size_t eq = v.find('=');
      if (eq == std::string::npos) throw std::invalid_argument(fmt::format("--model {}: expected KEY=VALUE", v));
      a.model.emplace_back(v.substr(0, eq), v.substr(eq + 1));
    }
    else throw std::invalid_argument(fmt::format("unknown option {}", k));
  }
  if (a.out.empty()) throw std::invalid_argument("--out DIR is required");
  if (a.steps < 1) throw std::invalid_argument("--steps must be >= 1");
  return a;
}

int run(const Args& a) {
  using namespace gpt2;
  Gpt2Config cfg = preset(a.preset);
  {
    Fields f;
    f.add_section("model", cfg);
    for (const auto& [key, value] : a.model) f.set("model." + key, value, "--model");
  }
  cfg = cfg.resolved();
  cfg.validate();
  const int B = a.batch, T = a.seq > 0 ? a.seq : cfg.T;
  OptimizerConfig oc = a.optimizer == "adamw" ? OptimizerConfig::adamw() : OptimizerConfig::original();
  oc.kind = parse_optimizer_kind(a.optimizer);
  if (oc.kind == OptimizerKind::kAdamW) oc.warmup_steps = 3;  // exercise warm-up within 10 steps
  if (a.precision != "fp32" && a.precision != "bf16") {
    throw std::invalid_argument(fmt::format("--precision {}: expected fp32 or bf16", a.precision));
  }
  auto be = make_cpu_backend(BackendOptions::with_threads(a.threads).with_bf16(a.precision == "bf16"));
  Gpt2 model(cfg);
  model.init_weights(a.seed);
  ActivationArena arena(cfg, ArenaSpec(B, T).with_stored(a.precision == "bf16" ? Dtype::bf16 : Dtype::f32));
  Optimizer opt(oc, model.num_params());

  std::mt19937 gen(static_cast<uint32_t>(a.seed));
  std::uniform_int_distribution<int32_t> tok(0, cfg.V - 1);
  std::vector<int32_t> batches(static_cast<size_t>(a.steps) * (B * T + 1));
  for (int32_t& t : batches) t = tok(gen);
  // Batch s: inputs batches[s][0 .. B*T), targets shifted by one.
  auto batch = [&](int s) { return batches.data() + static_cast<size_t>(s) * (B * T + 1); };

  Writer w(a.out + "/data.bin");
  w.add("batches", batches.data(), {a.steps, B * T + 1}, "int32");
  for (const ParamInfo& info : model.infos()) {
    w.add("param." + info.name, info.view->data, info.shape, "float32");
  }
  std::vector<float> losses;
  std::vector<double> norms;
  // The logits of the first batch (a forward alone: the step's backward
  // overwrites them), then the steps every stage runs (train/schedule/train_step.h).
  gpt2_forward(*be, model, arena.acts(), batch(0), nullptr);
  w.add("logits", arena.acts().logits.data, {B, T, cfg.V}, "float32");
  LocalTrainStep step(*be, model, opt, arena.acts());
  for (int s = 0; s < a.steps; ++s) {
    const StepResult r = step(batch(s), batch(s) + 1);
    losses.push_back(static_cast<float>(r.loss));
    norms.push_back(r.update.grad_norm);
    if (s == 0) {  // the update reads the gradients but leaves them in place
      for (const ParamInfo& info : model.infos()) {
        w.add("grad." + info.name, model.grad_data() + info.offset, info.shape, "float32");
      }
    }
  }
  w.add("losses", losses.data(), {a.steps}, "float32");
  std::vector<float> norms_f(norms.begin(), norms.end());
  w.add("grad_norms", norms_f.data(), {a.steps}, "float32");
  for (const ParamInfo& info : model.infos()) {
    w.add("final." + info.name, info.view->data, info.shape, "float32");
  }

  std::string names;
  for (const ParamInfo& info : model.infos()) names += fmt::format("{}\"{}\"", names.empty() ? "" : ", ", info.name);
  std::FILE* m = std::fopen((a.out + "/manifest.json").c_str(), "w");
  if (!m) throw std::runtime_error(fmt::format("cannot write {}/manifest.json", a.out));
  fmt::print(m,
             "{{\n  \"config\": {{\"V\": {}, \"T\": {}, \"L\": {}, \"NH\": {}, \"C\": {}, \"arch\": \"{}\", "
             "\"norm\": \"{}\", \"norm_position\": \"{}\", \"position\": \"{}\", \"rope_theta\": {}, "
             "\"activation\": \"{}\", \"mlp\": \"{}\", \"H\": {}, \"KVH\": {}, \"tie\": {}}},\n"
             "  \"B\": {}, \"seq\": {}, \"steps\": {},\n"
             "  \"optimizer\": {{\"kind\": \"{}\", \"lr\": {}, \"min_lr\": {}, \"warmup_steps\": {}, "
             "\"decay_steps\": {}, \"beta1\": {}, \"beta2\": {}, \"eps\": {}, \"weight_decay\": {}, "
             "\"grad_clip\": {}}},\n"
             "  \"params\": [{}],\n  \"arrays\": [\n{}\n  ]\n}}\n",
             cfg.V, cfg.T, cfg.L, cfg.NH, cfg.C, to_string(cfg.arch), to_string(cfg.norm),
             to_string(cfg.norm_position), to_string(cfg.position), cfg.rope_theta, to_string(cfg.activation),
             to_string(cfg.mlp), cfg.mlp_width(), cfg.kv_heads(), cfg.tie_embeddings ? "true" : "false", B, T, a.steps, to_string(oc.kind), oc.lr, oc.min_lr,
             oc.warmup_steps, oc.decay_steps, oc.beta1, oc.beta2, oc.eps, oc.weight_decay, oc.grad_clip,
             names, w.entries());
  std::fclose(m);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "export_reference: error: %s\n", e.what());
    return 2;
  }
}
