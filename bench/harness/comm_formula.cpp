// The communication formula of a tensor-parallel step (see comm_formula.h).
#include "comm_formula.h"

#include <fmt/format.h>

#include <stdexcept>

namespace gpt2::harness {

int64_t shard_parameters(const CommShape& s) {
  const int64_t C = s.n_embd, P = s.tp;
  // LayerNorm 1 and 2 (weight, bias) and the two row-parallel biases are
  // replicated; qkv (no bias), the attention projection and both MLP
  // matrices are split, and the fc bias with them.
  const int64_t per_layer = 2 * C + 3 * C * C / P + C * C / P + C + 2 * C + 4 * C * C / P + 4 * C / P + 4 * C * C / P + C;
  return s.vocab * C + s.block_size * C + s.n_layer * per_layer + 2 * C + s.vocab * C;
}

CommCounts expected_comm(const CommShape& s) {
  if (s.tp < 1 || s.dp < 1 || s.n_embd % s.tp != 0 || s.batch % s.dp != 0) {
    throw std::invalid_argument(fmt::format("no tensor-parallel layout: tp {} and dp {} for n_embd {} and batch {}",
                                            s.tp, s.dp, s.n_embd, s.batch));
  }
  if (!s.block_types.empty() && static_cast<int64_t>(s.block_types.size()) != s.n_layer) {
    throw std::invalid_argument(
        fmt::format("block_types has {} entries for {} layers", s.block_types.size(), s.n_layer));
  }
  const int64_t N = s.batch / s.dp * s.seq_len, C = s.n_embd;
  auto type = [&](int64_t l) { return s.block_types.empty() ? std::string("tp") : s.block_types[l]; };
  CommCounts c;
  if (s.tp > 1) {
    for (int64_t l = 0; l < s.n_layer;) {
      const std::string t = type(l);
      if (t == "tp") {
        c.tp_calls += 4;
        c.tp_bytes += 4 * 4 * N * C;
        ++l;
        continue;
      }
      if (t != "spd" && t != "parallel") throw std::invalid_argument(fmt::format("unknown block type '{}'", t));
      int64_t k = 1;
      while (t == "parallel" && l + k < s.n_layer && type(l + k) == "parallel") ++k;
      c.tp_calls += 2;
      c.tp_bytes += 4 * N * C + 4 * (N * C + 6 * C * k);
      l += k;
    }
    c.tp_calls += 1;
    c.tp_bytes += 8;
  }
  if (s.bucketed && s.dp > 1) return c;
  c.dp_calls = s.dp > 1 ? 2 : 0;
  c.dp_bytes = s.dp > 1 ? 4 * shard_parameters(s) + 8 : 0;
  return c;
}

}  // namespace gpt2::harness
