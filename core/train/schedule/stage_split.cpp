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

namespace {
// Stage s's cost with n layers, of `stages`. One body for every comparison of costs: where the compiler inlines a
// multiply and an add it may fuse them (-march=native), and a split chosen by comparing costs must compare the
// same values it was chosen from.
[[gnu::noinline]] double stage_cost(int n, size_t s, size_t stages, const StageCosts& k) {
  return n * k.layer + (s == 0 ? k.embed : 0.0) + (s + 1 == stages ? k.head : 0.0);
}
}  // namespace

std::vector<double> stage_split_costs(const std::vector<int>& counts, const StageCosts& k) {
  std::vector<double> costs;
  for (size_t s = 0; s < counts.size(); ++s) costs.push_back(stage_cost(counts[s], s, counts.size(), k));
  return costs;
}

std::vector<int> balance_stages(int layers, int stages, const StageCosts& k) {
  // Every layer costs the same, the first stage adds the embedding and the last the head (both, with one stage),
  // so the split is found directly (issue 70: the search over every composition took minutes at 64 layers on 8
  // stages). A stage's cost, as stage_split_costs computes it:
  const auto extra = [&](int s) { return (s == 0 ? k.embed : 0.0) + (s + 1 == stages ? k.head : 0.0); };
  const auto cost = [&](int n, int s) {
    return stage_cost(n, static_cast<size_t>(s), static_cast<size_t>(stages), k);
  };
  // The most layers stage s can hold at a worst cost of `w` (0: none).
  const auto most = [&](double w, int s) {
    if (cost(1, s) > w) return 0;
    int n = k.layer > 0 ? static_cast<int>(std::min<double>(layers, std::floor((w - extra(s)) / k.layer))) : layers;
    n = std::clamp(n, 1, layers);
    while (n < layers && cost(n + 1, s) <= w) ++n;  // the division's rounding, settled by the cost itself
    while (n > 1 && cost(n, s) > w) --n;
    return n;
  };
  const auto fits = [&](double w) {
    if (stages == 1) return most(w, 0) >= layers;
    const int first = most(w, 0), last = most(w, stages - 1), middle = stages > 2 ? most(w, 1) : 1;
    if (first == 0 || last == 0 || middle == 0) return false;
    return int64_t{first} + last + int64_t{middle} * (stages - 2) >= layers;
  };
  // The least worst cost is some stage's cost in the best split: one of n x layer + the stage's extra.
  std::vector<double> candidates;
  for (int n = 1; n <= layers; ++n) {
    candidates.push_back(cost(n, 0));
    if (stages > 1) candidates.push_back(cost(n, stages - 1));
    if (stages > 2) candidates.push_back(cost(n, 1));
  }
  std::sort(candidates.begin(), candidates.end());
  const auto found = std::partition_point(candidates.begin(), candidates.end(), [&](double w) { return !fits(w); });
  if (found == candidates.end()) return StageLayers::even_counts(layers, stages);  // no split fits: cannot happen
  const double worst = *found;
  // Among the splits of that worst cost: the fewest layers moved from the default rule's, then the earliest in
  // order. Each stage keeps its default count where that fits (lowering one below it moves two layers); the
  // layers this leaves over go to the last stages with room, which keeps the earlier counts smallest.
  std::vector<int> counts = StageLayers::even_counts(layers, stages);
  int left = 0;
  for (int s = 0; s < stages; ++s) {
    const int cap = most(worst, s);
    if (counts[static_cast<size_t>(s)] > cap) {
      left += counts[static_cast<size_t>(s)] - cap;
      counts[static_cast<size_t>(s)] = cap;
    }
  }
  for (int s = stages - 1; s >= 0 && left > 0; --s) {
    const int add = std::min(left, most(worst, s) - counts[static_cast<size_t>(s)]);
    counts[static_cast<size_t>(s)] += add;
    left -= add;
  }
  return counts;
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

}  // namespace gpt2
