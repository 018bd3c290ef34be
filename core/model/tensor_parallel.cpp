#include "model/tensor_parallel.h"

#include <fmt/format.h>

#include <numeric>
#include <stdexcept>

namespace gpt2 {

BlockType parse_block_type(const std::string& name, const std::string& key) {
  if (name == "tp") return BlockType::kTp;
  if (name == "spd") return BlockType::kSpd;
  if (name == "parallel") return BlockType::kParallel;
  throw std::invalid_argument(fmt::format("{}: unknown block type '{}'; expected tp, spd or parallel", key, name));
}

std::string to_string(BlockType t) {
  switch (t) {
    case BlockType::kTp: return "tp";
    case BlockType::kSpd: return "spd";
    case BlockType::kParallel: return "parallel";
  }
  return "?";
}

void TpPlace::validate(const Gpt2Config& model) const {
  const int n_layer = model.L, n_head = model.NH;
  if (size < 1) throw std::invalid_argument(fmt::format("parallel.tp: must be >= 1, got {}", size));
  if (n_head % size != 0) {
    throw std::invalid_argument(fmt::format(
        "parallel.tp {} does not divide model.n_head {}: every rank holds whole attention heads", size, n_head));
  }
  if (model.kv_heads() % size != 0) {
    throw std::invalid_argument(fmt::format(
        "parallel.tp {} does not divide the {} key/value heads (model.n_kv_head): every rank holds whole key/value "
        "heads", size, model.kv_heads()));
  }
  if (model.mlp_width() % size != 0) {
    throw std::invalid_argument(
        fmt::format("parallel.tp {} does not divide the MLP's hidden width {}", size, model.mlp_width()));
  }
  if (has_private() && model.post_norm()) {
    throw std::invalid_argument(
        "parallel.block_types: spd and parallel blocks keep private pre-norm residual streams; model.norm_position "
        "post needs tp blocks");
  }
  if (has_private() && model.bias != BiasKind::kProj) {
    throw std::invalid_argument(fmt::format(
        "parallel.block_types: spd and parallel blocks add the projections' biases on their private streams; "
        "model.bias {} needs tp blocks", to_string(model.bias)));
  }
  if (!blocks.empty() && static_cast<int>(blocks.size()) != n_layer) {
    throw std::invalid_argument(fmt::format(
        "parallel.block_types has {} entries but model.n_layer is {}: give one type per layer, or none (all tp)",
        blocks.size(), n_layer));
  }
  if (vocab && model.V > 0 && size > model.V) {
    throw std::invalid_argument(fmt::format(
        "parallel.vocab_parallel with parallel.tp {}: the vocabulary of {} entries has fewer rows than ranks", size,
        model.V));
  }
  if (rank < 0 || rank >= size) throw std::invalid_argument(fmt::format("tensor-parallel rank {} of {}", rank, size));
}

void TpPlace::check_group() const {
  if (size > 1 && (group == nullptr || group->size() != size || group->rank() != rank)) {
    throw std::invalid_argument(fmt::format("a tensor-parallel model of {} ranks needs its group of {} ranks", size, size));
  }
}

int TpPlace::run_start(int layer) const {
  if (type(layer) != BlockType::kParallel) return layer;
  while (layer > 0 && type(layer - 1) == BlockType::kParallel) --layer;
  return layer;
}

bool TpPlace::ends_run(int layer) const {
  if (type(layer) != BlockType::kParallel) return true;
  const int n = static_cast<int>(blocks.size());
  return layer + 1 >= n || type(layer + 1) != BlockType::kParallel;
}

bool TpPlace::has_private() const {
  if (size == 1) return false;
  for (BlockType t : blocks) {
    if (t != BlockType::kTp) return true;
  }
  return false;
}

std::string TpPlace::describe() const {
  if (blocks.empty()) return "tp";
  std::string s = to_string(blocks[0]);
  for (size_t i = 1; i < blocks.size(); ++i) {
    s += ',';
    s += to_string(blocks[i]);
  }
  return s;
}

int canonical_pieces(const Gpt2Config& c) {
  const int64_t H = c.mlp_width();
  for (int q : {4, 2}) {
    if (c.NH % q == 0 && c.kv_heads() % q == 0 && H % q == 0) return q;
  }
  return 1;
}

int canonical_column_tile(const Gpt2Config& c) {
  const int q = canonical_pieces(c);
  const int64_t HS = c.C / c.NH;
  const int64_t g = std::gcd(std::gcd(c.C / q, c.kv_heads() * HS / q), c.mlp_width() / q);
  int64_t tile = 1;
  for (int64_t d = 1; d <= std::min<int64_t>(g, 256); ++d) {
    if (g % d == 0) tile = d;
  }
  return static_cast<int>(tile);
}

}  // namespace gpt2
