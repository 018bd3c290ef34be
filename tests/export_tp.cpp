// export_tp: trains a small model on real MPI ranks with tensor parallelism
// (and data parallelism across tensor-parallel groups) and writes what the
// PyTorch reference of the block types (tp_torch_reference.py) compares: the
// full initial weights, the global batches, each step's loss and gradient
// norm, and the full weights after the steps (the shards gathered).
// Run as: mpiexec -n R export_tp --out DIR --tp P --blocks tp,spd,... (R = dp x P).
// Output: DIR/manifest.json and DIR/data.bin, as export_reference's, plus
// "tp", "dp" and "block_types" in the manifest (no logits or gradients).
#include <memory>
#include <fmt/format.h>

#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/gradient_sync.h"
#include "parallel/mpi/mpi_comm.h"
#include "parallel/process_grid.h"
#include "export_writer.h"
#include "model/activations.h"
#include "model/model.h"
#include "model/optim.h"
#include "model/params.h"
#include "train/run/run_state.h"
#include "train/schedule/train_step.h"
#include "util/fields.h"

namespace {

struct Args {
  std::string preset = "small";
  int layers = 0;  // 0: the preset's
  int batch = 4;
  int steps = 5;
  int tp = 2;
  std::string blocks;  // comma-separated, one per layer; "" = all tp
  uint64_t seed = 1337;
  std::string optimizer = "adam_original";
  std::string out;
};

const char* kUsage =
    "usage: mpiexec -n R export_tp --out DIR [--tp 2] [--blocks tp,spd,parallel,...] [--preset small]\n"
    "                              [--layers L] [--batch 4] [--steps 5] [--seed 1337] [--optimizer adam_original]\n";

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--help" || k == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) throw std::invalid_argument(fmt::format("{} needs a value", k));
    const std::string v = argv[++i];
    if (k == "--preset") a.preset = v;
    else if (k == "--layers") a.layers = static_cast<int>(gpt2::parse_int64(k, v));
    else if (k == "--batch") a.batch = static_cast<int>(gpt2::parse_int64(k, v));
    else if (k == "--steps") a.steps = static_cast<int>(gpt2::parse_int64(k, v));
    else if (k == "--tp") a.tp = static_cast<int>(gpt2::parse_int64(k, v));
    else if (k == "--blocks") a.blocks = v;
    else if (k == "--seed") a.seed = gpt2::parse_uint64(k, v);
    else if (k == "--optimizer") a.optimizer = v;
    else if (k == "--out") a.out = v;
    else throw std::invalid_argument(fmt::format("unknown option {}", k));
  }
  if (a.out.empty()) throw std::invalid_argument("--out DIR is required");
  if (a.steps < 1) throw std::invalid_argument("--steps must be >= 1");
  return a;
}

int run(const Args& a, gpt2::Communicator& world) {
  using namespace gpt2;
  Gpt2Config cfg = preset(a.preset);
  if (a.layers > 0) cfg.L = a.layers;
  const int B = a.batch, T = cfg.T;
  OptimizerConfig oc = a.optimizer == "adamw" ? OptimizerConfig::adamw() : OptimizerConfig::original();
  oc.kind = parse_optimizer_kind(a.optimizer);
  ParallelConfig pc;
  pc.tp = a.tp;
  pc.block_types = parse_name_list("--blocks", a.blocks);
  ProcessGrid grid(world, a.tp);
  if (B % grid.dp() != 0) throw std::invalid_argument(fmt::format("--batch {} over {} replicas", B, grid.dp()));
  const int rows = B / grid.dp(), first_row = grid.dp_comm().rank() * rows;

  auto be = make_cpu_backend(1);
  Gpt2 model(cfg, host_memory(), grid.layout(pc.blocks()));
  model.init_weights(a.seed);
  ActivationArena arena(model, rows, T);
  Optimizer opt(oc, model.num_params());
  GradientSync sync(grid.dp_comm(), model.grad_data(), model.num_params(), 0);
  const std::unique_ptr<StepFunction> step =
      data_parallel_step({*be, model, opt, grid.dp_comm(), B, 0.0}, arena.acts(), sync);

  // Every rank draws the same global batches (export_reference's: batch s is
  // B*T + 1 tokens, inputs its first B*T, targets the same shifted by one);
  // each replica takes its rows.
  std::mt19937 gen(static_cast<uint32_t>(a.seed));
  std::uniform_int_distribution<int32_t> tok(0, cfg.V - 1);
  const size_t batch_len = static_cast<size_t>(B) * T + 1;
  std::vector<int32_t> batches(static_cast<size_t>(a.steps) * batch_len);
  for (int32_t& t : batches) t = tok(gen);

  std::vector<float> losses, norms;
  for (int s = 0; s < a.steps; ++s) {
    const int32_t* mine = batches.data() + static_cast<size_t>(s) * batch_len + static_cast<size_t>(first_row) * T;
    const StepResult res = step->step(mine, mine + 1);
    losses.push_back(static_cast<float>(res.loss));
    norms.push_back(static_cast<float>(res.update.grad_norm));
  }
  const std::vector<float> final_full = gather_full(cfg, grid, model.params_to_host());
  if (world.rank() != 0) return 0;

  ParamTensors full_views;
  const std::vector<ParamInfo> infos = layout(cfg, full_views);
  const std::vector<float> initial = initial_weights(cfg, a.seed);
  Writer w(a.out + "/data.bin");
  w.add("batches", batches.data(), {a.steps, B * T + 1}, "int32");
  for (const ParamInfo& info : infos) w.add("param." + info.name, initial.data() + info.offset, info.shape, "float32");
  w.add("losses", losses.data(), {a.steps}, "float32");
  w.add("grad_norms", norms.data(), {a.steps}, "float32");
  for (const ParamInfo& info : infos) w.add("final." + info.name, final_full.data() + info.offset, info.shape, "float32");

  std::string names, types;
  for (const ParamInfo& info : infos) names += fmt::format("{}\"{}\"", names.empty() ? "" : ", ", info.name);
  for (int l = 0; l < cfg.L; ++l) types += fmt::format("{}\"{}\"", l ? ", " : "", to_string(model.tp().type(l)));
  std::FILE* m = std::fopen((a.out + "/manifest.json").c_str(), "w");
  if (!m) throw std::runtime_error(fmt::format("cannot write {}/manifest.json", a.out));
  fmt::print(m,
             "{{\n  \"config\": {{\"V\": {}, \"T\": {}, \"L\": {}, \"NH\": {}, \"C\": {}}},\n"
             "  \"B\": {}, \"seq\": {}, \"steps\": {}, \"tp\": {}, \"dp\": {}, \"block_types\": [{}],\n"
             "  \"optimizer\": {{\"kind\": \"{}\", \"lr\": {}, \"min_lr\": {}, \"warmup_steps\": {}, "
             "\"decay_steps\": {}, \"beta1\": {}, \"beta2\": {}, \"eps\": {}, \"weight_decay\": {}, "
             "\"grad_clip\": {}}},\n"
             "  \"params\": [{}],\n  \"arrays\": [\n{}\n  ]\n}}\n",
             cfg.V, cfg.T, cfg.L, cfg.NH, cfg.C, B, T, a.steps, grid.tp(), grid.dp(), types, to_string(oc.kind),
             oc.lr, oc.min_lr, oc.warmup_steps, oc.decay_steps, oc.beta1, oc.beta2, oc.eps, oc.weight_decay,
             oc.grad_clip, names, w.entries());
  std::fclose(m);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto world = gpt2::make_mpi_communicator(&argc, &argv);
  try {
    return run(parse(argc, argv), *world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "export_tp: rank %d: error: %s\n", world->rank(), e.what());
    world->abort(2);
  }
}
