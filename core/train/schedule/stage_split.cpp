#include "train/schedule/stage_split.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/ops/op_costs.h"
#include "model/params.h"

namespace gpt2 {

namespace {

// One op's cost at `s`: FLOPs plus bytes at kFlopsPerByte.
double cost(const std::string& op, const ops::OpShape& s) {
  const ops::OpCost c = ops::op_cost(op, s);
  return c.flop + kFlopsPerByte * c.bytes;
}

// One op's forward and backward at `s`.
double both(const std::string& op, const ops::OpShape& s) { return cost(op + "_forward", s) + cost(op + "_backward", s); }

// The op table's shape of an op at a step's rows x T positions of `m`: input width c, output width oc (products).
ops::OpShape op_shape(const Gpt2Config& m, int rows, int T, int64_t c, int64_t oc) {
  ops::OpShape s{rows, T, c, m.NH, m.V, oc, 0};
  s.KVH = m.kv_heads();
  return s;
}

}  // namespace

StageCosts stage_costs(const Gpt2Config& m, int rows, int T) {
  const int64_t C = m.C, V = m.V, H = m.mlp_width();
  const std::string norm = m.rms() ? "rmsnorm" : "layernorm";
  const auto shape = [&](int64_t c, int64_t oc) { return op_shape(m, rows, T, c, oc); };
  StageCosts k;
  // A layer: two norms, the four products, the attention, the MLP's nonlinearity (the op table's element-wise
  // shapes are N x 4C, SwiGLU's N x 8C -> 4C: C there is H / 4), and the two residual adds (forward only).
  k.layer = 2 * both(norm, shape(C, 0)) + both("matmul", shape(C, m.qkv_width())) + both("matmul", shape(C, C)) +
            both("matmul", shape(C, m.fc_width())) + both("matmul", shape(H, C)) + both("attention", shape(C, 0));
  k.layer += both(m.swiglu() ? std::string("swiglu") : to_string(m.activation_kind()), shape(H / 4, 0));
  k.layer += 2 * cost("residual_forward", shape(C, 0));
  if (m.rope()) k.layer += both("rope", shape(C, 0));
  k.embed = both("encoder", shape(C, 0));
  k.head = both(norm, shape(C, 0)) + both("matmul", shape(C, V)) + both("crossentropy", shape(C, 0));
  return k;
}

PassTimes layer_pass_costs(const Gpt2Config& m, int rows, int T) {
  const int64_t C = m.C, H = m.mlp_width();
  const std::string norm = m.rms() ? "rmsnorm" : "layernorm";
  const auto shape = [&](int64_t c, int64_t oc) { return op_shape(m, rows, T, c, oc); };
  const std::string act = m.swiglu() ? std::string("swiglu") : to_string(m.activation_kind());
  const ops::OpShape products[] = {shape(C, m.qkv_width()), shape(C, C), shape(C, m.fc_width()), shape(H, C)};
  double forward = 2 * cost(norm + "_forward", shape(C, 0)) + cost("attention_forward", shape(C, 0)) +
                   cost(act + "_forward", shape(H / 4, 0)) + 2 * cost("residual_forward", shape(C, 0));
  double backward = 2 * cost(norm + "_backward", shape(C, 0)) + cost("attention_backward", shape(C, 0)) +
                    cost(act + "_backward", shape(H / 4, 0));
  double weight = 0;
  for (const ops::OpShape& s : products) {
    forward += cost("matmul_forward", s);
    backward += cost("matmul_backward", s);
    weight += cost("matmul_forward", s);  // the weight gradient: a product of the forward's size
  }
  if (m.rope()) {
    forward += cost("rope_forward", shape(C, 0));
    backward += cost("rope_backward", shape(C, 0));
  }
  return {1.0, (backward - weight) / forward, weight / forward};
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

int interleaved_stage(int stages, int rank, int chunk) { return chunk * stages + rank; }

int v_shape_stage(int stages, int rank, int chunk) { return chunk == 0 ? rank : 2 * stages - 1 - rank; }

std::vector<int> StageSplit::stages_of(int rank) const {
  if (rank < 0 || rank >= ranks) throw std::invalid_argument(fmt::format("pipeline rank {} of {}", rank, ranks));
  std::vector<int> out;
  for (int c = 0; c < chunks(); ++c) out.push_back(placement()(ranks, rank, c));
  return out;
}

// The inverses of the placements.
int StageSplit::rank_of(int stage) const {
  if (v_shape) return stage < ranks ? stage : 2 * ranks - 1 - stage;
  return stage % ranks;
}

int StageSplit::chunk_of(int stage) const { return v_shape ? (stage < ranks ? 0 : 1) : stage / ranks; }

StageLayers StageSplit::held(int rank) const {
  if (counts.empty()) return StageLayers{};
  return StageLayers::of_stages(counts, stages_of(rank));
}

StageSplit stage_split(const RunConfig& c) { return stage_split(c, stage_layer_counts(c)); }

StageSplit stage_split(const RunConfig& c, std::vector<int> counts) {
  StageSplit s;
  s.counts = std::move(counts);
  s.ranks = c.parallel.pp;
  s.v_shape = c.parallel.schedule == ScheduleKind::kZbV;
  const std::vector<std::string>& given = c.parallel.pass_times;
  if (!given.empty() && !s.v_shape) {
    throw std::invalid_argument(fmt::format("parallel.pass_times: shapes zb-v's lists only, not parallel.schedule {}",
                                            to_string(c.parallel.schedule)));
  }
  if (s.v_shape && given.empty()) {
    s.passes = layer_pass_costs(c.model, c.train.batch_size / std::max(c.parallel.microbatches, 1), c.train.seq_len);
  } else if (s.v_shape) {
    std::string list;
    for (const std::string& g : given) list += (list.empty() ? "" : ",") + g;
    double x[3] = {0, 0, 0};
    bool ok = given.size() == 3;
    for (size_t i = 0; ok && i < 3; ++i) {
      size_t used = 0;
      try {
        x[i] = std::stod(given[i], &used);
      } catch (const std::exception&) {
        used = 0;
      }
      ok = used == given[i].size() && std::isfinite(x[i]) && x[i] > 0 && x[i] < 1e6;
    }
    if (!ok) {
      throw std::invalid_argument(fmt::format("parallel.pass_times {}: three positive numbers F,B,W (a chunk's "
                                              "forward, input-gradient and weight-gradient times), e.g. 1,1.3,0.5",
                                              list));
    }
    s.passes = {x[0], x[1], x[2]};
  }
  return s;
}

std::vector<int> stage_layer_counts(const RunConfig& c) {
  const int L = c.model.L, v = std::max(c.parallel.virtual_stages, 1), p = c.parallel.pp * v;
  const std::vector<std::string>& given = c.parallel.stage_layers;
  if (v > 1 && p > L) {
    throw std::invalid_argument(fmt::format("parallel.pp {} x parallel.virtual_stages {} = {} stages for model.n_layer "
                                            "{}: each stage holds at least one layer", c.parallel.pp, v, p, L));
  }
  (void)StageLayers::of(L, p, 0);  // no more stages than layers (names parallel.pp)
  if (given.empty() && v > 1 && L % p != 0) {
    throw std::invalid_argument(fmt::format(
        "parallel.virtual_stages {}: parallel.pp {} x {} = {} chunks do not divide model.n_layer {} (give "
        "parallel.stage_layers {} counts, or auto)", v, c.parallel.pp, v, p, L, p));
  }
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
    refuse(v > 1 ? fmt::format("{} counts for parallel.pp {} x parallel.virtual_stages {} = {} stages (one count per "
                               "stage in layer order, or auto)", given.size(), c.parallel.pp, v, p)
                 : fmt::format("{} counts for parallel.pp {} stages (one count per stage, or auto)", given.size(), p));
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
