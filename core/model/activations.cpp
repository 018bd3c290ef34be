#include "model/activations.h"

#include <fmt/format.h>

#include <functional>
#include <stdexcept>

namespace gpt2 {

namespace {
using Visit = std::function<void(Tensor&, std::initializer_list<int64_t>)>;

// The one list of activation tensors and their shapes, in arena order: P
// tensor-parallel ranks, and the private-run buffers if `runs`.
void visit(const Gpt2Config& cfg, int B, int T, int P, bool runs, StageLayers stage, bool split, Activations& a,
           const Visit& f) {
  const int64_t C = cfg.C, V = cfg.V, NH = cfg.NH;
  a.B = B;
  a.T = T;
  a.first = stage.first;
  a.split_backward = split;
  a.layers.resize(static_cast<size_t>(cfg.L));
  f(a.encoded, {B, T, C});
  for (int i = stage.first; i < stage.end(cfg.L); ++i) {
    LayerActivations& l = a.layers[static_cast<size_t>(i)];
    f(l.ln1, {B, T, C});
    f(l.ln1_mean, {B, T});
    f(l.ln1_rstd, {B, T});
    f(l.qkv, {B, T, 3 * C / P});
    f(l.atty, {B, T, C / P});
    f(l.att_lse, {B, NH / P, T});
    f(l.residual2, {B, T, C});
    f(l.ln2, {B, T, C});
    f(l.ln2_mean, {B, T});
    f(l.ln2_rstd, {B, T});
    f(l.fch, {B, T, 4 * C / P});
    f(l.fch_gelu, {B, T, 4 * C / P});
    f(l.residual3, {B, T, C});
    // B has finished with each of these forward tensors when it writes the
    // gradient kept for W in its place: the split costs no memory.
    l.d_res3 = split ? l.residual3 : Tensor{};
    l.d_fch = split ? l.fch : Tensor{};
    l.d_res2 = split ? l.residual2 : Tensor{};
    l.d_qkv = split ? l.qkv : Tensor{};
  }
  const int64_t Bh = stage.head ? B : 0;
  f(a.lnf, {Bh, T, C});
  f(a.lnf_mean, {Bh, T});
  f(a.lnf_rstd, {Bh, T});
  f(a.logits, {Bh, T, V});
  f(a.losses, {Bh, T});
  f(a.proj, {B, T, C});
  f(a.dresidual, {B, T, C});
  f(a.dln, {B, T, C});
  f(a.datty, {B, T, C / P});
  f(a.dqkv, {B, T, 3 * C / P});
  f(a.dfch, {B, T, 4 * C / P});
  f(a.run_sum, {runs ? B : 0, T, C});
  f(a.drun, {runs ? B * T * C + 6 * C * cfg.L : 0});
  a.zero_rows.assign(runs ? static_cast<size_t>(B) * static_cast<size_t>(T) : 0, 0);
}

// Keeps every tensor 64-byte aligned inside the arena.
size_t padded(size_t n) { return (n + 15) / 16 * 16; }
}  // namespace

namespace {
size_t arena_floats(const Gpt2Config& cfg, int B, int T, int P, bool runs, StageLayers stage, bool split) {
  Activations scratch;
  size_t total = 0;
  visit(cfg, B, T, P, runs, stage, split, scratch, [&](Tensor&, std::initializer_list<int64_t> dims) {
    size_t n = 1;
    for (int64_t d : dims) n *= static_cast<size_t>(d);
    total += padded(n);
  });
  return total;
}
}  // namespace

ActivationArena::ActivationArena(const Gpt2Config& cfg, int B, int T, Memory& memory, const TpLayout& tp,
                                 StageLayers stage, bool split_backward)
    : cfg_(cfg), tp_(tp.size), private_runs_(tp.has_private()), stage_(stage), split_(split_backward) {
  cfg_.validate();
  if (B <= 0 || T <= 0 || T > cfg.T) {
    throw std::invalid_argument(fmt::format(
        "activations: need 0 < B and 0 < T <= block_size ({}), got B={} T={}", cfg.T, B, T));
  }
  stage_.last = stage_.end(cfg_.L);
  buf_ = Buffer(arena_floats(cfg_, B, T, tp_, private_runs_, stage_, split_), memory);
  carve(B, T);
}

ActivationArena::ActivationArena(const Gpt2& model, int B, int T, bool split_backward)
    : ActivationArena(model.config(), B, T, model.memory(), model.tp(), model.stage(), split_backward) {}

void ActivationArena::reshape(int B, int T) {
  if (B <= 0 || T <= 0 || T > cfg_.T || arena_floats(cfg_, B, T, tp_, private_runs_, stage_, split_) > buf_.size()) {
    throw std::invalid_argument(fmt::format(
        "activations: cannot reshape to B={} T={} (arena holds B*T <= {})", B, T, acts_.B * acts_.T));
  }
  carve(B, T);
}

void ActivationArena::carve(int B, int T) {
  size_t offset = 0;
  visit(cfg_, B, T, tp_, private_runs_, stage_, split_, acts_, [&](Tensor& t, std::initializer_list<int64_t> dims) {
    t = Tensor(buf_.data() + offset, dims);
    offset += padded(static_cast<size_t>(t.numel()));
  });
}

}  // namespace gpt2
