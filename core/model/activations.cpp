#include "model/activations.h"

#include <fmt/format.h>

#include <functional>
#include <stdexcept>

namespace gpt2 {

namespace {
using Visit = std::function<void(Tensor&, std::initializer_list<int64_t>, Dtype)>;

// The one list of activation tensors, their shapes and their element types,
// in arena order: P tensor-parallel ranks, and the private-run buffers if
// `runs`. `stored` is the type of the tensors a matrix product alone reads,
// forward and backward (the norms' outputs before a product, the attention's
// output but under context parallelism, the MLP's hidden activations);
// everything else is f32.
void visit(const Gpt2Config& cfg, int B, int T, TpShape tp, bool runs, StageLayers stage, bool split, bool recompute,
           Dtype stored, Activations& a, const Visit& f_typed) {
  const auto f = [&](Tensor& t, std::initializer_list<int64_t> dims) { f_typed(t, dims, Dtype::f32); };
  const auto lo = [&](Tensor& t, std::initializer_list<int64_t> dims) { f_typed(t, dims, stored); };
  // Post-norm's ln1 is the residual stream and its ln2 the second norm's input: both stay f32.
  const auto norm_out = [&](Tensor& t, std::initializer_list<int64_t> dims) {
    f_typed(t, dims, cfg.post_norm() ? Dtype::f32 : stored);
  };
  const int64_t C = cfg.C, V = tp.vocab_rows(cfg.V), NH = cfg.NH, P = tp.size;
  const int64_t QKV = cfg.qkv_width(), H = cfg.mlp_width(), FC = cfg.fc_width();
  const bool swiglu = cfg.swiglu();
  // The residual stream's rows on this rank: (B, T), or with sequence parallelism (1, B*T/P).
  const bool seq = tp.sequence && P > 1;
  const int64_t Bs = seq ? 1 : B, Ts = seq ? int64_t{B} * T / P : T, Bsm = cfg.rms() ? 0 : Bs;
  a.sequence = seq;
  a.B = B;
  a.T = T;
  a.first = stage.first;
  a.last = stage.end(cfg.L);
  a.embed = stage.embed;
  a.head = stage.head;
  a.split_backward = split;
  a.recompute = recompute;
  a.layers.resize(static_cast<size_t>(cfg.L));
  // First, and as long as the model's block whatever (B, T): its place and
  // its zeros survive reshape (zeroed once, at construction).
  f(a.no_pos, {cfg.rope() || (tp.vocab && stage.embed) ? static_cast<int64_t>(cfg.T) : 0, C});
  f(a.encoded, {Bs, Ts, C});
  for (int i = stage.first; i < stage.end(cfg.L); ++i) {
    LayerActivations& l = a.layers[static_cast<size_t>(i)];
    if (recompute && i > stage.first) {
      // Recomputation: one set of a layer's tensors, shared by every layer (the
      // backward runs each layer's forward again into it), and each layer's
      // output of its own (the next layer's input, what the recomputation starts from).
      l = a.layers[static_cast<size_t>(stage.first)];
      f(l.residual3, {Bs, Ts, C});
      continue;
    }
    norm_out(l.ln1, {Bs, Ts, C});
    f(l.ln1_mean, {Bsm, Ts});
    f(l.ln1_rstd, {Bs, Ts});
    f(l.qkv, {B, T, QKV / P});
    // Context parallelism's ring merges into the attention's output and reads D = dO . O from it: f32.
    f_typed(l.atty, {B, T, C / P}, tp.context > 1 ? Dtype::f32 : stored);
    f(l.att_lse, {B, NH / P, T});
    f(l.residual2, {Bs, Ts, C});
    norm_out(l.ln2, {Bs, Ts, C});
    f(l.ln2_mean, {Bsm, Ts});
    f(l.ln2_rstd, {Bs, Ts});
    f(l.fch, {B, T, FC / P});
    lo(l.fch_gelu, {B, T, H / P});
    f(l.residual3, {Bs, Ts, C});
    // B has finished with each of these forward tensors when it writes the
    // gradient kept for W in its place: the split costs no memory. SwiGLU's
    // backward cannot write over its own input, so its d_fch has a place of its own.
    l.d_res3 = split ? l.residual3 : Tensor{};
    l.d_fch = split && !swiglu ? l.fch : Tensor{};
    if (split && swiglu) f(l.d_fch, {B, T, FC / P});
    l.d_res2 = split ? l.residual2 : Tensor{};
    l.d_qkv = split ? l.qkv : Tensor{};
  }
  const int64_t Bh = stage.head ? B : 0;
  const int64_t Bhs = stage.head ? Bs : 0;
  lo(a.lnf, {Bh, T, C});
  f(a.lnf_mean, {cfg.rms() ? 0 : Bhs, Ts});
  f(a.lnf_rstd, {Bhs, Ts});
  f(a.logits, {Bh, T, V});
  f(a.losses, {Bh, T});
  const int64_t Bv = tp.vocab || cfg.masks_vocab() ? Bh : 0;
  f(a.ce_parts, {P + 1, Bv * T});
  f(a.ce_lse, {Bv, T});
  f(a.proj, {B, T, C});
  f(a.dresidual, {Bs, Ts, C});
  f(a.dln, {B, T, C});
  f(a.datty, {B, T, C / P});
  f(a.dqkv, {B, T, QKV / P});
  f(a.dfch, {B, T, FC / P});
  f(a.dhid, {swiglu ? B : 0, T, H / P});
  f(a.dpos, {cfg.rope() ? T : 0, C});
  f(a.run_sum, {runs ? B : 0, T, C});
  f(a.drun, {runs ? B * T * C + 6 * C * cfg.L : 0});
  f(a.sp_rows, {seq ? 1 : 0, Ts, C});
  f(a.sp_norm_grads, {seq ? 4 * C : 0});
  f(a.sp_stats, {seq ? 2 * int64_t{B} * T : 0});
  const int64_t ctx = tp.context > 1 ? 2 : 0;
  f(a.cp_kv, {ctx, B, T, (QKV - C) / P});
  f(a.cp_dkv, {ctx, B, T, (QKV - C) / P});
  a.zero_rows.assign(runs ? static_cast<size_t>(B) * static_cast<size_t>(T) : 0, 0);
  a.vocab_ids.assign(tp.vocab ? static_cast<size_t>(B) * static_cast<size_t>(T) : 0, -1);
}

// The floats n elements of `d` take, padded so that every tensor stays
// 64-byte aligned inside the arena (a bf16 tensor takes half the bytes).
size_t padded(size_t n, Dtype d) {
  const size_t floats = d == Dtype::bf16 ? (n + 1) / 2 : n;
  return (floats + 15) / 16 * 16;
}
}  // namespace

ArenaKinds arena_kinds(const Gpt2Config& cfg, int B, int T, TpShape tp, bool runs, StageLayers stage, bool split,
                       bool recompute, Dtype stored) {
  Activations a;
  ArenaKinds k;
  visit(cfg, B, T, tp, runs, stage, split, recompute, stored, a,
        [&](Tensor& t, std::initializer_list<int64_t> dims, Dtype d) {
    size_t n = 1;
    for (int64_t d : dims) n *= static_cast<size_t>(d);
    const auto* at = reinterpret_cast<const char*>(&t);
    const auto* layers = reinterpret_cast<const char*>(a.layers.data());
    const bool in_layers = at >= layers && at < layers + a.layers.size() * sizeof(LayerActivations);
    const bool head = &t == &a.lnf || &t == &a.lnf_mean || &t == &a.lnf_rstd || &t == &a.logits || &t == &a.losses ||
                      &t == &a.ce_parts || &t == &a.ce_lse;
    size_t& kind = in_layers ? k.layers : head ? k.head : (&t == &a.encoded || &t == &a.no_pos) ? k.embed : k.scratch;
    kind += padded(n, d);
  });
  return k;
}

size_t arena_floats(const Gpt2Config& cfg, int B, int T, TpShape tp, bool runs, StageLayers stage, bool split,
                    bool recompute, Dtype stored) {
  return arena_kinds(cfg, B, T, tp, runs, stage, split, recompute, stored).total();
}

ActivationArena::ActivationArena(const Gpt2Config& cfg, const ArenaSpec& spec, Memory& memory, const TpPlace& tp,
                                 StageLayers stage)
    : cfg_(cfg),
      tp_(tp.shape()),
      private_runs_(tp.has_private()),
      stage_(stage),
      split_(spec.split_backward),
      recompute_(spec.recompute),
      stored_(spec.stored) {
  cut_rows(spec);
  init(spec.rows, spec.seq_len, memory);
}

void ActivationArena::cut_rows(const ArenaSpec& spec) {
  tp_.sequence = spec.sequence_parallel && tp_.size > 1;
  tp_.context = spec.context.size;
  acts_.cp = spec.context;
  pieces_T_ = spec.pieces ? spec.seq_len : 0;
  if (spec.context.on() && spec.context.group == nullptr) {
    throw std::invalid_argument("activations: context parallelism needs its group");
  }
}

void ActivationArena::init(int B, int T, Memory& memory) {
  if (stored_ != Dtype::f32 && !memory.is_host()) {
    throw std::invalid_argument(fmt::format("activations: {} stored activations are built for host memory only, not {}",
                                            to_string(stored_), memory.name()));
  }
  cfg_.validate();
  if (B <= 0 || T <= 0 || T > cfg_.T) {
    throw std::invalid_argument(fmt::format(
        "activations: need 0 < B and 0 < T <= block_size ({}), got B={} T={}", cfg_.T, B, T));
  }
  stage_.last = stage_.end(cfg_.L);
  if (!stage_.more.empty()) {
    throw std::invalid_argument(fmt::format("activations: an arena holds one chunk of layers, not the {} of a rank "
                                            "with virtual stages (name the chunk)", stage_.chunks()));
  }
  kinds_ = arena_kinds(cfg_, B, T, tp_, private_runs_, stage_, split_, recompute_, stored_);
  buf_ = Buffer(kinds_.total(), memory);
  carve(B, T);
  // The zero position table of a RoPE model's embedding, or of a vocabulary shard's (nothing writes it).
  if (acts_.no_pos.numel() > 0) {
    memory.zero(acts_.no_pos.data, static_cast<size_t>(acts_.no_pos.numel()) * sizeof(float));
  }
}

ActivationArena::ActivationArena(const Gpt2& model, const ArenaSpec& spec, const StageLayers* chunk)
    : cfg_(model.config()),
      tp_(model.tp().shape()),
      private_runs_(model.tp().has_private()),
      stage_(chunk != nullptr ? *chunk : model.stage()),
      split_(spec.split_backward),
      recompute_(spec.recompute),
      stored_(spec.stored) {
  cut_rows(spec);
  init(spec.rows, spec.seq_len, model.memory());
}

void ActivationArena::reshape(int B, int T) {
  if (B <= 0 || T <= 0 || T > cfg_.T || arena_floats(cfg_, B, T, tp_, private_runs_, stage_, split_, recompute_, stored_) > buf_.size()) {
    throw std::invalid_argument(fmt::format(
        "activations: cannot reshape to B={} T={} (arena holds B*T <= {})", B, T, acts_.B * acts_.T));
  }
  carve(B, T);
}

void ActivationArena::carve(int B, int T) {
  if (tp_.sequence && (int64_t{B} * T) % tp_.size != 0) {
    throw std::invalid_argument(fmt::format("activations: sequence parallelism cuts the B*T = {} rows over {} ranks; "
                                            "they must divide", int64_t{B} * T, tp_.size));
  }
  if (tp_.context > 1 && B % 2 != 0) {
    throw std::invalid_argument(fmt::format("activations: a context-parallel arena holds head and tail chunks: B = {} "
                                            "must be even", B));
  }
  acts_.attention = T == pieces_T_  ? AttentionKind::kPieces
                    : acts_.cp.on() ? AttentionKind::kRing
                                    : AttentionKind::kPlain;
  size_t offset = 0;
  visit(cfg_, B, T, tp_, private_runs_, stage_, split_, recompute_, stored_, acts_,
        [&](Tensor& t, std::initializer_list<int64_t> dims, Dtype d) {
    t = Tensor(buf_.data() + offset, dims);
    t.dtype = d;
    offset += padded(static_cast<size_t>(t.numel()), d);
  });
}

}  // namespace gpt2
