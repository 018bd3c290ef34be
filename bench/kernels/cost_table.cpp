// Prints the training step as kernel calls with what each costs (FLOPs and
// minimum bytes from the op table's op_costs.h, the one definition) and the time a
// machine with the given ceilings needs at best for it: the roofline bound
// max(FLOPs / peak, bytes / bandwidth). For comparing a first run on new
// hardware (a GPU) with what the hardware allows.
//   cost_table [--preset original] [--batch 16] [--peak-gflops 67000] [--bandwidth-gbs 3000]
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "app/cli.h"
#include "kernels/ops/op_costs.h"
#include "model/config.h"
#include "model/params.h"
#include "util/fields.h"

namespace {

constexpr const char* kHelp = R"(cost_table: the training step's kernels, their FLOPs and minimum bytes
(core/kernels/ops/op_costs.cpp) and the roofline bound of each on a machine
with the given ceilings. Prints a Markdown table.

usage: cost_table [--OPTION VALUE ...]
)";

struct Options {
  std::string preset = "original";
  int batch = 16;
  double peak = 67000, bandwidth = 3000;

  gpt2::Fields fields() {
    gpt2::Fields f;
    f.add("preset", preset, "model configuration: original | small");
    f.add("batch", batch, "batch rows (sequence length = the preset's block size)");
    f.add("peak-gflops", peak, "compute ceiling, GFLOP/s (67000: H100 SXM FP32, NVIDIA's data sheet)");
    f.add("bandwidth-gbs", bandwidth, "memory ceiling, GB/s (3000: the device copy seen on an H100 here)");
    return f;
  }
};

struct Row {
  std::string name;
  int calls;
  gpt2::ops::OpCost cost;
};

int run(int argc, char** argv) {
  Options o;
  const gpt2::Fields fields = o.fields();
  const std::string defaults = fields.help();
  const gpt2::CommandLine cl = gpt2::parse_command_line({argv + 1, argv + argc}, fields);
  if (cl.help) {
    fmt::print("{}{}", kHelp, defaults);
    return 0;
  }
  if (!cl.positional.empty()) {
    throw std::invalid_argument(fmt::format("unexpected argument '{}' (see --help)", cl.positional.front()));
  }
  gpt2::apply_settings(fields, cl);
  if (o.batch <= 0) throw std::invalid_argument(fmt::format("--batch: expected a positive number, got {}", o.batch));
  for (const auto& [flag, x] : {std::pair{"peak-gflops", o.peak}, std::pair{"bandwidth-gbs", o.bandwidth}}) {
    if (!(x > 0)) throw std::invalid_argument(fmt::format("--{}: expected a positive number, got {}", flag, x));
  }
  const std::string& preset = o.preset;
  const double peak = o.peak, bandwidth = o.bandwidth;
  const gpt2::Gpt2Config cfg = gpt2::preset(preset);
  gpt2::ops::OpShape s;
  s.B = o.batch;
  s.T = cfg.T;
  s.C = cfg.C;
  s.NH = cfg.NH;
  s.V = cfg.V;
  s.P = static_cast<int64_t>(gpt2::param_count(cfg));
  const int L = cfg.L;
  auto at = [&](int64_t in, int64_t out) {
    gpt2::ops::OpShape m = s;
    m.C = in;
    m.OC = out;
    return m;
  };
  using gpt2::ops::op_cost;
  const int64_t C = cfg.C;
  const std::vector<std::pair<std::string, gpt2::ops::OpShape>> matmuls = {
      {"qkv", at(C, 3 * C)}, {"attn_proj", at(C, C)}, {"fc", at(C, 4 * C)}, {"fc_proj", at(4 * C, C)},
      {"lm_head", at(C, cfg.V)}};
  std::vector<Row> rows;
  rows.push_back({"encoder_forward", 1, op_cost("encoder_forward", s)});
  rows.push_back({"layernorm_forward", 2 * L + 1, op_cost("layernorm_forward", s)});
  for (const auto& [name, m] : matmuls) {
    rows.push_back({fmt::format("matmul_forward {} ({} -> {})", name, m.C, m.OC), name == "lm_head" ? 1 : L,
                    op_cost("matmul_forward", m)});
  }
  rows.push_back({"attention_forward", L, op_cost("attention_forward", s)});
  rows.push_back({"gelu_forward", L, op_cost("gelu_forward", s)});
  rows.push_back({"residual_forward", 2 * L, op_cost("residual_forward", s)});
  rows.push_back({"crossentropy_forward", 1, op_cost("crossentropy_forward", s)});
  rows.push_back({"crossentropy_backward", 1, op_cost("crossentropy_backward", s)});
  for (const auto& [name, m] : matmuls) {
    rows.push_back({fmt::format("matmul_backward {}", name), name == "lm_head" ? 1 : L,
                    op_cost("matmul_backward", m)});
  }
  rows.push_back({"attention_backward", L, op_cost("attention_backward", s)});
  rows.push_back({"gelu_backward", L, op_cost("gelu_backward", s)});
  rows.push_back({"layernorm_backward", 2 * L + 1, op_cost("layernorm_backward", s)});
  rows.push_back({"encoder_backward", 1, op_cost("encoder_backward", s)});
  rows.push_back({"gradient norm (sum_squares)", 1, op_cost("sum_squares", s)});
  rows.push_back({"adam_update (all tensors)", 1, op_cost("adam_update", s)});

  fmt::print("{} (B {}, T {}, C {}, NH {}, V {}, L {}; {} parameters); ceilings {:.0f} GFLOP/s, {:.0f} GB/s\n\n",
             preset, s.B, s.T, s.C, s.NH, s.V, L, s.P, peak, bandwidth);
  fmt::print("| Kernel (calls per step) | MFLOP per call | MB per call | FLOP/byte | Bound per step, µs |\n");
  fmt::print("|---|---:|---:|---:|---:|\n");
  double flop = 0, bytes = 0, bound = 0;
  for (const Row& r : rows) {
    const double t = r.calls * std::max(r.cost.flop / (peak * 1e9), r.cost.bytes / (bandwidth * 1e9));
    flop += r.calls * r.cost.flop;
    bytes += r.calls * r.cost.bytes;
    bound += t;
    fmt::print("| {} ({}) | {:.1f} | {:.2f} | {:.1f} | {:.1f} |\n", r.name, r.calls, r.cost.flop / 1e6,
               r.cost.bytes / 1e6, r.cost.intensity(), t * 1e6);
  }
  fmt::print("| **step** | {:.0f} | {:.0f} | | **{:.0f}** |\n", flop / 1e6, bytes / 1e6, bound * 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return gpt2::tool_main("cost_table", run, argc, argv); }
