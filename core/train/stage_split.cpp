#include "train/stage_split.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/ops/op_costs.h"
#include "model/params.h"

namespace gpt2 {

namespace {

// One op's forward and backward at `s`, FLOPs plus bytes at kFlopsPerByte.
double both(const std::string& op, const ops::OpShape& s) {
  double total = 0;
  for (const char* pass : {"_forward", "_backward"}) {
    const ops::OpCost c = ops::op_cost(op + pass, s);
    total += c.flop + kFlopsPerByte * c.bytes;
  }
  return total;
}

}  // namespace

StageCosts stage_costs(const Gpt2Config& m, int rows, int T) {
  const int64_t B = rows, C = m.C, NH = m.NH, KVH = m.kv_heads(), V = m.V, H = m.mlp_width();
  const std::string norm = m.rms() ? "rmsnorm" : "layernorm";
  const auto shape = [&](int64_t c, int64_t oc) {
    ops::OpShape s{B, T, c, NH, V, oc, 0};
    s.KVH = KVH;
    return s;
  };
  StageCosts k;
  // A layer: two norms, the four products, the attention, the MLP's nonlinearity (the op table's element-wise
  // shapes are N x 4C, SwiGLU's N x 8C -> 4C: C there is H / 4), and the two residual adds (forward only).
  k.layer = 2 * both(norm, shape(C, 0)) + both("matmul", shape(C, m.qkv_width())) + both("matmul", shape(C, C)) +
            both("matmul", shape(C, m.fc_width())) + both("matmul", shape(H, C)) + both("attention", shape(C, 0));
  k.layer += both(m.swiglu() ? std::string("swiglu") : to_string(m.activation_kind()), shape(H / 4, 0));
  const ops::OpCost add = ops::op_cost("residual_forward", shape(C, 0));
  k.layer += 2 * (add.flop + kFlopsPerByte * add.bytes);
  if (m.rope()) k.layer += both("rope", shape(C, 0));
  k.embed = both("encoder", shape(C, 0));
  k.head = both(norm, shape(C, 0)) + both("matmul", shape(C, V)) + both("crossentropy", shape(C, 0));
  return k;
}

std::vector<double> stage_split_costs(const std::vector<int>& counts, const StageCosts& k) {
  std::vector<double> costs;
  for (size_t s = 0; s < counts.size(); ++s) {
    costs.push_back(counts[s] * k.layer + (s == 0 ? k.embed : 0.0) + (s + 1 == counts.size() ? k.head : 0.0));
  }
  return costs;
}

std::vector<int> balance_stages(int layers, int stages, const StageCosts& k) {
  const std::vector<int> even = StageLayers::even_counts(layers, stages);
  std::vector<int> best, cur(static_cast<size_t>(stages));
  double best_max = std::numeric_limits<double>::infinity();
  int best_moved = 0;
  // Every composition of `layers` into `stages` positive parts (pipelines are short: at most a few hundred
  // thousand compositions for 64 layers over 4 stages), in lexicographic order.
  const auto visit = [&](const auto& self, int s, int left) -> void {
    if (s + 1 == stages) {
      cur[static_cast<size_t>(s)] = left;
      const std::vector<double> costs = stage_split_costs(cur, k);
      const double worst = *std::max_element(costs.begin(), costs.end());
      int moved = 0;
      for (int i = 0; i < stages; ++i) moved += std::abs(cur[static_cast<size_t>(i)] - even[static_cast<size_t>(i)]);
      if (worst < best_max || (worst == best_max && moved < best_moved)) {
        best = cur;
        best_max = worst;
        best_moved = moved;
      }
      return;
    }
    for (int n = 1; n <= left - (stages - 1 - s); ++n) {
      cur[static_cast<size_t>(s)] = n;
      self(self, s + 1, left - n);
    }
  };
  visit(visit, 0, layers);
  return best;
}

std::vector<int> stage_layer_counts(const RunConfig& c) {
  const int L = c.model.L, p = c.parallel.pp;
  const std::vector<std::string>& given = c.parallel.stage_layers;
  (void)StageLayers::of(L, p, 0);  // no more stages than layers (names parallel.pp)
  if (given.empty()) return StageLayers::even_counts(L, p);
  if (given.size() == 1 && given[0] == "auto") {
    return balance_stages(L, p, stage_costs(c.model, c.train.batch_size, c.train.seq_len));
  }
  const auto refuse = [&](const std::string& why) {
    std::string list;
    for (const std::string& g : given) list += (list.empty() ? "" : ",") + g;
    throw std::invalid_argument(fmt::format("parallel.stage_layers {}: {}", list, why));
  };
  if (static_cast<int>(given.size()) != p) {
    refuse(fmt::format("{} counts for parallel.pp {} stages (one count per stage, or auto)", given.size(), p));
  }
  std::vector<int> counts;
  int sum = 0;
  for (const std::string& g : given) {
    size_t used = 0;
    int n = 0;
    try {
      n = std::stoi(g, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != g.size() || n < 1) refuse(fmt::format("'{}' is not a positive layer count (or auto)", g));
    counts.push_back(n);
    sum += n;
  }
  if (sum != L) refuse(fmt::format("the counts sum to {}, not model.n_layer {}", sum, L));
  return counts;
}

}  // namespace gpt2
