#include "model/activations.h"

#include <fmt/format.h>

#include <functional>
#include <stdexcept>

namespace gpt2 {

namespace {
using Visit = std::function<void(Tensor&, std::initializer_list<int64_t>)>;

// The one list of activation tensors and their shapes, in arena order.
void visit(const Gpt2Config& cfg, int B, int T, Activations& a, const Visit& f) {
  const int64_t C = cfg.C, V = cfg.V, NH = cfg.NH;
  a.B = B;
  a.T = T;
  a.layers.resize(static_cast<size_t>(cfg.L));
  f(a.encoded, {B, T, C});
  for (LayerActivations& l : a.layers) {
    f(l.ln1, {B, T, C});
    f(l.ln1_mean, {B, T});
    f(l.ln1_rstd, {B, T});
    f(l.qkv, {B, T, 3 * C});
    f(l.atty, {B, T, C});
    f(l.att_lse, {B, NH, T});
    f(l.residual2, {B, T, C});
    f(l.ln2, {B, T, C});
    f(l.ln2_mean, {B, T});
    f(l.ln2_rstd, {B, T});
    f(l.fch, {B, T, 4 * C});
    f(l.fch_gelu, {B, T, 4 * C});
    f(l.residual3, {B, T, C});
  }
  f(a.lnf, {B, T, C});
  f(a.lnf_mean, {B, T});
  f(a.lnf_rstd, {B, T});
  f(a.logits, {B, T, V});
  f(a.losses, {B, T});
  f(a.proj, {B, T, C});
  f(a.dresidual, {B, T, C});
  f(a.dln, {B, T, C});
  f(a.datty, {B, T, C});
  f(a.dqkv, {B, T, 3 * C});
  f(a.dfch, {B, T, 4 * C});
}

// Keeps every tensor 64-byte aligned inside the arena.
size_t padded(size_t n) { return (n + 15) / 16 * 16; }
}  // namespace

namespace {
size_t arena_floats(const Gpt2Config& cfg, int B, int T) {
  Activations scratch;
  size_t total = 0;
  visit(cfg, B, T, scratch, [&](Tensor&, std::initializer_list<int64_t> dims) {
    size_t n = 1;
    for (int64_t d : dims) n *= static_cast<size_t>(d);
    total += padded(n);
  });
  return total;
}
}  // namespace

ActivationArena::ActivationArena(const Gpt2Config& cfg, int B, int T, Memory& memory) : cfg_(cfg) {
  cfg_.validate();
  if (B <= 0 || T <= 0 || T > cfg.T) {
    throw std::invalid_argument(fmt::format(
        "activations: need 0 < B and 0 < T <= block_size ({}), got B={} T={}", cfg.T, B, T));
  }
  buf_ = Buffer(arena_floats(cfg_, B, T), memory);
  carve(B, T);
}

void ActivationArena::reshape(int B, int T) {
  if (B <= 0 || T <= 0 || T > cfg_.T || arena_floats(cfg_, B, T) > buf_.size()) {
    throw std::invalid_argument(fmt::format(
        "activations: cannot reshape to B={} T={} (arena holds B*T <= {})", B, T, acts_.B * acts_.T));
  }
  carve(B, T);
}

void ActivationArena::carve(int B, int T) {
  size_t offset = 0;
  visit(cfg_, B, T, acts_, [&](Tensor& t, std::initializer_list<int64_t> dims) {
    t = Tensor(buf_.data() + offset, dims);
    offset += padded(static_cast<size_t>(t.numel()));
  });
}

}  // namespace gpt2
