#include "model/model.h"

#include <array>
#include <span>
#include <stdexcept>
#include <utility>

namespace gpt2 {

namespace {

// `attend(layer, w, x)`, below, is the attention of one layer, from x.ln1 to
// x.atty: the full causal attention of a training or prompt forward, or one
// decode step over a key/value cache. Everything else in a block is the same
// for both. A template parameter, not a std::function: nothing is allocated.

Tensor block_input(Activations& a, int l) {
  return l == a.first ? a.encoded : a.layers[static_cast<size_t>(l - 1)].residual3;
}

// The group sum of a tensor-parallel model; nothing with one rank.
void tp_sum(const TpPlace& tp, Tensor x) {
  if (tp.size > 1) tp.group->allreduce_sum(x);
}

// The variant's components (model/config.h), each a choice of kernel made
// from the configuration: the norm, the MLP's nonlinearity, RoPE and the
// attention's head counts. The blocks below call these, never a kernel of
// one variant directly.
struct Parts {
  Backend& be;
  const Gpt2Config& cfg;
  int NH, KVH;  // this rank's query and key/value heads
  TreeProducts* tree;  // with tp.pieces: the backend's canonical-piece products (row_parallel)
  // train.sequence_pieces (kernels/sequence_pieces.h): the attention, the
  // loss's sum and the token table's gradient as the pair tree; null when off.
  PieceOps* pieces;
  // The pieces' operations for arena `a`, whose kind was decided when it
  // was made (Activations::attention); null for another kind.
  PieceOps* pieces_in(const Activations& a) const {
    if (a.attention != AttentionKind::kPieces) return nullptr;
    if (pieces == nullptr)
      throw std::logic_error(be.name() + ": an arena of sequence pieces, on a backend without them");
    return pieces;
  }

  Parts(Backend& b, const Gpt2& model)
      : be(b), cfg(model.config()), NH(cfg.NH / model.tp().size), KVH(cfg.kv_heads() / model.tp().size),
        tree(model.tp().pieces > 0 ? b.tree_products() : nullptr), pieces(b.piece_ops()) {
    // tp.pieces come from the backend's capability (train/resolve/layout.h deterministic_pieces).
    if (model.tp().pieces > 0 && tree == nullptr) {
      throw std::logic_error(b.name() + ": the model was laid out in canonical pieces this backend cannot multiply");
    }
  }

  void norm(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor w, Tensor b) const {
    if (cfg.rms()) be.rmsnorm_forward(out, rstd, inp, w);
    else be.layernorm_forward(out, mean, rstd, inp, w, b);
  }
  // dinp += (both norms accumulate into their input's gradient).
  void norm_backward(Tensor dinp, Tensor dw, Tensor db, Tensor dout, Tensor inp, Tensor w, Tensor mean,
                     Tensor rstd) const {
    if (cfg.rms()) be.rmsnorm_backward(dinp, dw, dout, inp, w, rstd);
    else be.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd);
  }
  // The MLP's hidden activations from the fc output: act(fch), or SwiGLU's silu(gate) * up.
  void activation(Tensor out, Tensor fch) const {
    if (cfg.swiglu()) {
      be.swiglu_forward(out, fch);
      return;
    }
    switch (cfg.activation_kind()) {
      case ActivationKind::kRelu: be.relu_forward(out, fch); break;
      case ActivationKind::kSilu: be.silu_forward(out, fch); break;
      default: be.gelu_forward(out, fch); break;
    }
  }
  // dfch = from dhid, the gradient at the hidden activations. A single
  // activation works in place (dhid may be dfch); SwiGLU needs them apart.
  void activation_backward(Tensor dfch, Tensor dhid, Tensor fch) const {
    if (cfg.swiglu()) {
      be.swiglu_backward(dfch, dhid, fch);
      return;
    }
    switch (cfg.activation_kind()) {
      case ActivationKind::kRelu: be.relu_backward(dfch, dhid, fch); break;
      case ActivationKind::kSilu: be.silu_backward(dfch, dhid, fch); break;
      default: be.gelu_backward(dfch, dhid, fch); break;
    }
  }
  // Where the gradient at the hidden activations goes: dfch itself, or (SwiGLU) a.dhid.
  Tensor hidden_grad(const Activations& a) const { return cfg.swiglu() ? a.dhid : a.dfch; }
  // RoPE on the rows of x (q, k and v, or their gradient): at positions
  // pos0.., or (an arena cut by context parallelism) at its chunks' positions.
  void rotate(Tensor x, int pos0, const ContextCut& cp, bool backward) const {
    if (!cfg.rope()) return;
    const auto turn = [&](Tensor t, int pos) {
      if (backward) be.rope_backward(t, NH, KVH, pos, cfg.rope_theta);
      else be.rope_forward(t, NH, KVH, pos, cfg.rope_theta);
    };
    if (!cp.on()) {
      turn(x, pos0);
      return;
    }
    for (int part = 0; part < 2; ++part) turn(context_half(x, part), cp.chunk(part) * static_cast<int>(x.dim(1)));
  }
  // q, k and v of rows at positions pos0.. (or `cp`'s chunks) from `in`, RoPE turned.
  void qkv(Tensor out, Tensor in, const LayerParams& w, int pos0, const ContextCut& cp = {}) const {
    be.matmul_forward(out, in, w.qkv_w, w.qkv_b);
    rotate(out, pos0, cp, false);
  }
  // The causal attention of a training or prompt forward: whole rows, or
  // the ring over an arena cut by context parallelism; under
  // train.sequence_pieces the pieces' tiles over every row's keys (all-gathered under cp).
  void attention(LayerActivations& x, Activations& a) const {
    switch (a.attention) {
      case AttentionKind::kPieces:  // pieces_attention_* check the backend has them
        pieces_attention_forward(be, a.cp, x.atty, x.att_lse, x.qkv, NH, KVH, a.piece_buffers);
        break;
      case AttentionKind::kRing:
        ring_attention_forward(be, a.cp, x.atty, x.att_lse, x.qkv, a.cp_kv, NH, KVH);
        break;
      case AttentionKind::kPlain:
        be.attention_forward(x.atty, x.att_lse, x.qkv, NH, KVH);
        break;
    }
  }
  // The attention's backward to the gradient at the qkv product's output.
  void attention_backward(Tensor dqkv, Tensor datty, const LayerActivations& x, Activations& a) const {
    switch (a.attention) {
      case AttentionKind::kPieces:
        pieces_attention_backward(be, a.cp, dqkv, datty, x.atty, x.att_lse, x.qkv, NH, KVH, a.piece_buffers);
        break;
      case AttentionKind::kRing:
        ring_attention_backward(be, a.cp, dqkv, datty, x.atty, x.att_lse, x.qkv, a.cp_kv, a.cp_dkv, NH, KVH);
        break;
      case AttentionKind::kPlain:
        be.attention_backward(dqkv, datty, x.atty, x.att_lse, x.qkv, NH, KVH);
        break;
    }
    rotate(dqkv, a.pos0, a.cp, true);
  }
  // The head's matrix: lm_head, or wte when tied.
  static Tensor head(const Gpt2Config& c, const ParamTensors& p) { return c.tie_embeddings ? p.wte : p.lm_head; }
};

// out (N,C) = in (N,C) + bias (C) on every row, as the embedding kernel with
// one token row (bias) and `in` as the position table; zero_rows holds N
// zeros (token ids). Its backward is bias_rows_backward.
void add_bias_rows(Backend& be, Tensor out, Tensor in, Tensor bias, const std::vector<int32_t>& zero_rows) {
  const int64_t N = in.numel() / in.dim(in.ndim - 1), C = in.dim(in.ndim - 1);
  be.encoder_forward(Tensor(out.data, {1, N, C}), zero_rows.data(), Tensor(bias.data, {1, C}),
                     Tensor(in.data, {N, C}));
}

// dbias (C) += the column sums of dout (N,C); `scratch` (N,C) receives dout
// added to whatever it held (the embedding kernel's position gradient).
void bias_rows_backward(Backend& be, Tensor dbias, Tensor scratch, Tensor dout, const std::vector<int32_t>& zero_rows) {
  const int64_t N = dout.numel() / dout.dim(dout.ndim - 1), C = dout.dim(dout.ndim - 1);
  be.encoder_backward(Tensor(dbias.data, {1, C}), Tensor(scratch.data, {N, C}), Tensor(dout.data, {1, N, C}),
                      zero_rows.data());
}

// A row-parallel product (attn_proj, fc_proj) summed over the group: rank
// 0's product adds the bias. By default the group allreduces; with
// tp.pieces (train.deterministic) the product is the canonical tree over
// its inner dimension's pieces, this rank's subtree (TreeProducts::
// matmul_forward_tree) finished across the ranks by tree_sum.
void row_parallel(const Parts& k, const TpPlace& tp, Tensor out, Tensor in, Tensor w, Tensor b) {
  const Tensor bias = tp.rank == 0 ? b : Tensor{};
  if (tp.pieces == 0) {
    k.be.matmul_forward(out, in, w, bias);
    tp_sum(tp, out);
    return;
  }
  const int64_t inner[] = {in.cols()};
  k.tree->matmul_forward_tree(out, in, w, bias, inner, tp.pieces / tp.size);
  if (tp.size > 1) tp.group->tree_sum(out);
}

// A column-parallel product's backward (qkv, fc): this rank's rows' weight
// and bias gradients, and the input gradient summed over the group. With
// tp.pieces the input gradient is the canonical tree over the pieces of the
// output rows' `segments` (q, k, v; SwiGLU's gate and up), as row_parallel.
void column_parallel_backward(const Parts& k, const TpPlace& tp, Tensor dinp, Tensor dw, Tensor db, Tensor dout,
                              Tensor in, Tensor w, std::span<const int64_t> segments) {
  if (tp.pieces == 0) {
    k.be.matmul_backward(dinp, dw, db, dout, in, w);
    tp_sum(tp, dinp);
    return;
  }
  if (!dw.empty()) k.be.matmul_backward(Tensor{}, dw, db, dout, in, w);
  k.tree->matmul_backward_input_tree(dinp, dout, w, segments, tp.pieces / tp.size);
  if (tp.size > 1) tp.group->tree_sum(dinp);
}

// This rank's segments of the qkv rows (q, k, v heads) and of the fc rows
// (SwiGLU: gate, then up): the pieces of column_parallel_backward. No heap:
// the step allocates nothing.
struct Segments {
  std::array<int64_t, 3> len{};
  size_t n = 0;
  operator std::span<const int64_t>() const { return {len.data(), n}; }  // NOLINT: a list of lengths
};
Segments qkv_segments(const Parts& k) {
  const int64_t HS = k.cfg.C / k.cfg.NH;
  return {{k.NH * HS, k.KVH * HS, k.KVH * HS}, 3};
}
Segments fc_segments(const Parts& k, const Tensor& fc_w) {
  return k.cfg.swiglu() ? Segments{{fc_w.dim(0) / 2, fc_w.dim(0) / 2, 0}, 2} : Segments{{fc_w.dim(0), 0, 0}, 1};
}

// A standard (tp) pre-norm block: with one rank the plain GPT-2 block;
// with P ranks Megatron's, this rank's heads and MLP columns, the two
// row-parallel products summed over the group (g), their biases added by
// rank 0 only.
template <typename AttentionStep>
void pre_norm_block(const Parts& k, const TpPlace& tp, const LayerParams& w, LayerActivations& x, Tensor residual,
                    Tensor proj, int l, const AttentionStep& attend) {
  Backend& be = k.be;
  k.norm(x.ln1, x.ln1_mean, x.ln1_rstd, residual, w.ln1_w, w.ln1_b);
  attend(l, w, x, x.ln1);
  row_parallel(k, tp, proj, x.atty, w.attn_proj_w, w.attn_proj_b);
  be.residual_forward(x.residual2, residual, proj);
  k.norm(x.ln2, x.ln2_mean, x.ln2_rstd, x.residual2, w.ln2_w, w.ln2_b);
  be.matmul_forward(x.fch, x.ln2, w.fc_w, w.fc_b);
  k.activation(x.fch_gelu, x.fch);
  row_parallel(k, tp, proj, x.fch_gelu, w.fc_proj_w, w.fc_proj_b);
  be.residual_forward(x.residual3, x.residual2, proj);
}

// This rank's rows of a whole (B,T,C) tensor under sequence parallelism,
// shaped as the arena's row tensors (`rows`, e.g. a.encoded) are.
Tensor rows_of(Tensor whole, const TpPlace& tp, const Tensor& rows) {
  return Tensor(whole.data + tp.rank * rows.numel(), {1, rows.dim(1), rows.dim(2)});
}

// The f32 scratch `scratch` (its memory and shape) holding `like`'s element
// type: with train.precision bf16 a norm's output is bf16 and is gathered,
// or written, as bf16 into the scratch's first half.
Tensor typed_like(Tensor scratch, const Tensor& like) {
  if (!like.is_bf16()) return scratch;
  Tensor t(reinterpret_cast<bf16*>(scratch.data), {scratch.numel()});
  t.shape = scratch.shape;
  t.ndim = scratch.ndim;
  return t;
}

// Sequence parallelism's row-parallel product: this rank's part of the
// product (rank 0's with the bias) into `whole`, its sum over the group
// reduce-scattered into `rows`; with tp.pieces (train.deterministic) the
// canonical tree's product and order, as row_parallel's.
void sp_row_parallel(const Parts& k, const TpPlace& tp, Tensor whole, Tensor in, Tensor w, Tensor b, Tensor rows) {
  const Tensor bias = tp.rank == 0 ? b : Tensor{};
  if (tp.pieces == 0) {
    k.be.matmul_forward(whole, in, w, bias);
    tp.group->reduce_scatter_sum(whole, rows);
    return;
  }
  const int64_t inner[] = {in.cols()};
  k.tree->matmul_forward_tree(whole, in, w, bias, inner, tp.pieces / tp.size);
  tp.group->tree_reduce_scatter(whole, rows);
}

// Megatron's sequence parallelism (Korthikanti et al. 2022; Activations::
// sequence): the pre-norm tp block with the residual stream cut by rows over
// the group. Each norm runs on this rank's rows, which the layer keeps, and
// its output is all-gathered (g) into a scratch for the column-parallel
// product (and gathered again in the backward, as Megatron does); each
// row-parallel product's sum over the group is reduce-scattered (g-bar) back
// to rows, where the residual adds happen. The same function as
// pre_norm_block: its all-reduce is this reduce-scatter then the next gather.
template <typename AttentionStep>
void sequence_parallel_block(const Parts& k, const TpPlace& tp, const LayerParams& w, LayerActivations& x,
                             Activations& a, Tensor residual, int l, const AttentionStep& attend) {
  Backend& be = k.be;
  const Tensor whole = a.proj;  // (B,T,C): a norm's output gathered, then a row-parallel product's output
  k.norm(x.ln1, x.ln1_mean, x.ln1_rstd, residual, w.ln1_w, w.ln1_b);
  const Tensor ln1 = typed_like(whole, x.ln1), ln2 = typed_like(whole, x.ln2);  // the norms' outputs, gathered
  tp.group->all_gather(x.ln1, ln1);
  attend(l, w, x, ln1);
  sp_row_parallel(k, tp, whole, x.atty, w.attn_proj_w, w.attn_proj_b, a.sp_rows);
  be.residual_forward(x.residual2, residual, a.sp_rows);
  k.norm(x.ln2, x.ln2_mean, x.ln2_rstd, x.residual2, w.ln2_w, w.ln2_b);
  tp.group->all_gather(x.ln2, ln2);
  be.matmul_forward(x.fch, ln2, w.fc_w, w.fc_b);
  k.activation(x.fch_gelu, x.fch);
  sp_row_parallel(k, tp, whole, x.fch_gelu, w.fc_proj_w, w.fc_proj_b, a.sp_rows);
  be.residual_forward(x.residual3, x.residual2, a.sp_rows);
}

// Post-norm's tensors by their roles: the arena is laid out once for both
// norm positions, so post-norm's land in the pre-norm slots
// (model/activations.h); each name here means one thing.
struct PostNormRoles {
  Tensor& r2;   // x + attn(x): in residual2
  Tensor& h;    // norm1(r2), the MLP's input and its residual: in ln1
  Tensor& r3;   // h + mlp(h), norm2's input: in ln2's slot
  Tensor& out;  // norm2(r3), the block's output: in residual3
};
PostNormRoles post_norm_roles(LayerActivations& x) { return {x.residual2, x.ln1, x.ln2, x.residual3}; }

// A post-norm block (the original Transformer's): r2 = x + attn(x),
// h = norm1(r2), r3 = h + mlp(h), out = norm2(r3); tensor parallel as the
// pre-norm block.
template <typename AttentionStep>
void post_norm_block(const Parts& k, const TpPlace& tp, const LayerParams& w, LayerActivations& x, Tensor residual,
                     Tensor proj, int l, const AttentionStep& attend) {
  Backend& be = k.be;
  const bool bias_here = tp.rank == 0;
  const PostNormRoles v = post_norm_roles(x);
  attend(l, w, x, residual);
  be.matmul_forward(proj, x.atty, w.attn_proj_w, bias_here ? w.attn_proj_b : Tensor{});
  tp_sum(tp, proj);
  be.residual_forward(v.r2, residual, proj);
  k.norm(v.h, x.ln1_mean, x.ln1_rstd, v.r2, w.ln1_w, w.ln1_b);
  be.matmul_forward(x.fch, v.h, w.fc_w, w.fc_b);
  k.activation(x.fch_gelu, x.fch);
  be.matmul_forward(proj, x.fch_gelu, w.fc_proj_w, bias_here ? w.fc_proj_b : Tensor{});
  tp_sum(tp, proj);
  be.residual_forward(v.r3, v.h, proj);
  k.norm(v.out, x.ln2_mean, x.ln2_rstd, v.r3, w.ln2_w, w.ln2_b);
}

// A layer of a private run (model/tensor_parallel.h) on this rank's stream s
// (the run's input x at its first layer). a.run_sum collects this rank's
// partial outputs a_i and m_i; rank 0's carry the biases too, so that the
// group sum holds them once. At the run's end the sum is taken and the
// layer's residual3 becomes the run's output x + sum, the same on every
// rank; inside the run it is this rank's next stream u + m_i + b.
template <typename AttentionStep>
void private_block(const Parts& k, const TpPlace& tp, Activations& a, int l, const LayerParams& w,
                   const AttentionStep& attend) {
  Backend& be = k.be;
  LayerActivations& x = a.layers[static_cast<size_t>(l)];
  const int start = tp.run_start(l);
  const bool root = tp.rank == 0, end = tp.ends_run(l);
  const Tensor s = block_input(a, l);
  auto collect = [&](Tensor t, bool first) {
    if (first) be.copy(a.run_sum, t);
    else be.residual_forward(a.run_sum, a.run_sum, t);
  };
  k.norm(x.ln1, x.ln1_mean, x.ln1_rstd, s, w.ln1_w, w.ln1_b);
  attend(l, w, x, x.ln1);
  be.matmul_forward(a.proj, x.atty, w.attn_proj_w, Tensor{});           // a_i
  add_bias_rows(be, x.residual2, a.proj, w.attn_proj_b, a.zero_rows);  // a_i + b
  collect(root ? x.residual2 : a.proj, l == start);
  be.residual_forward(x.residual2, x.residual2, s);  // u = s + a_i + b
  k.norm(x.ln2, x.ln2_mean, x.ln2_rstd, x.residual2, w.ln2_w, w.ln2_b);
  be.matmul_forward(x.fch, x.ln2, w.fc_w, w.fc_b);
  k.activation(x.fch_gelu, x.fch);
  be.matmul_forward(a.proj, x.fch_gelu, w.fc_proj_w, Tensor{});  // m_i
  if (root || !end) add_bias_rows(be, x.residual3, a.proj, w.fc_proj_b, a.zero_rows);  // m_i + b
  collect(root ? x.residual3 : a.proj, false);
  if (end) {
    tp_sum(tp, a.run_sum);
    be.residual_forward(x.residual3, block_input(a, start), a.run_sum);  // x + the sum
  } else {
    be.residual_forward(x.residual3, x.residual3, x.residual2);  // s = u + m_i + b
  }
}

void head_forward(const Parts& k, const TpPlace& tp, const ParamTensors& p, Activations& a) {
  if (a.sequence) {  // this rank's rows normed, then gathered whole for the (replicated) head
    const Tensor rows = typed_like(a.sp_rows, a.lnf);
    k.norm(rows, a.lnf_mean, a.lnf_rstd, a.layers.back().residual3, p.lnf_w, p.lnf_b);
    tp.group->all_gather(rows, a.lnf);
  } else {
    k.norm(a.lnf, a.lnf_mean, a.lnf_rstd, a.layers.back().residual3, p.lnf_w, p.lnf_b);
  }
  k.be.matmul_forward(a.logits, a.lnf, Parts::head(k.cfg, p), Tensor{});
}

// The embedding: token rows plus learned position rows, or (RoPE) token
// rows alone, through the same kernel with a zero position table. With the
// vocabulary sharded (TpShape::vocab) each rank looks up the tokens its
// rows hold (the others as -1: a.vocab_ids), rank 0 alone adds the position
// rows, and the group's sum puts each row together: one token row and one
// position row, the rest exact zeros, so the sum is the unsharded value.
// `id0`: where out's rows start among the arena's (a.vocab_ids).
void embed(const Parts& k, const TpPlace& tp, const ParamTensors& p, Activations& a, Tensor out, const int32_t* tokens,
           int pos, size_t id0 = 0) {
  const int64_t C = k.cfg.C;
  const bool vocab = tp.shape().vocab;
  const bool no_positions = k.cfg.rope() || (vocab && tp.rank != 0);
  const Tensor pos_rows = no_positions ? a.no_pos : Tensor(p.wpe.data + pos * C, {p.wpe.dim(0) - pos, C});
  if (!vocab) {
    k.be.encoder_forward(out, tokens, p.wte, pos_rows);
    return;
  }
  const int64_t v0 = tp.vocab_begin(k.cfg.V), rows = p.wte.dim(0), n = out.numel() / C;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = tokens[i] - v0;
    a.vocab_ids[id0 + static_cast<size_t>(i)] = id >= 0 && id < rows ? static_cast<int32_t>(id) : -1;
  }
  k.be.encoder_forward(out, a.vocab_ids.data() + id0, p.wte, pos_rows);
  tp_sum(tp, out);
}

// The embedding of the arena's B x T tokens into `out` (B,T,C): its rows at
// positions 0.., or (an arena cut by context parallelism) each half at its
// chunk's positions (model/context_parallel.h).
void embed_rows(const Parts& k, const TpPlace& tp, const ParamTensors& p, Activations& a, Tensor out,
                const int32_t* tokens) {
  if (!a.cp.on()) {
    embed(k, tp, p, a, out, tokens, 0);
    return;
  }
  const int64_t n = int64_t{a.B} / 2 * a.T;
  for (int part = 0; part < 2; ++part) {
    embed(k, tp, p, a, context_half(out, part), tokens + part * n, a.cp.chunk(part) * a.T, static_cast<size_t>(part * n));
  }
}

// The mean loss of the logits against `targets` (a.losses per position).
// With the vocabulary sharded, from every shard's statistics (the logits
// never gathered): each rank's log-sum-exp into its row of a.ce_parts and
// the target's logit (on the rank holding it) into the last row, summed over
// the group, then put together the same way on every rank.
// A vocabulary with masked padding (model.vocab_valid) takes the same path:
// unsharded, as one shard of one rank (every rank of a tensor-parallel group
// holds the whole logits then, so nothing is summed over the group), its
// statistics over the valid columns only.
float loss_forward(const Parts& k, const TpPlace& tp, Activations& a, const int32_t* targets) {
  Backend& be = k.be;
  const bool sharded = tp.shape().vocab;
  if (!sharded && !k.cfg.masks_vocab()) {
    be.crossentropy_forward(a.losses, a.logits, targets);
  } else {
    const int64_t N = a.ce_lse.numel(), P = sharded ? tp.size : 1, r = sharded ? tp.rank : 0;
    const Tensor parts(a.ce_parts.data, {P + 1, N});
    be.zero(parts);
    be.crossentropy_shard_stats(Tensor(parts.data + r * N, {N}), Tensor(parts.data + P * N, {N}), a.logits, targets,
                                sharded ? tp.vocab_begin(k.cfg.V) : 0, k.cfg.valid_vocab());
    if (sharded) tp_sum(tp, parts);
    be.crossentropy_shard_combine(Tensor(a.losses.data, {N}), a.ce_lse, parts);
  }
  if (PieceOps* pieces = k.pieces_in(a)) {  // the pair tree's sum, finished over the context-parallel group
    double sum = pieces->sum_pieces(a.losses), count = static_cast<double>(a.losses.numel());
    if (a.cp.on()) {
      sum = a.cp.group->tree_sum(sum);
      count *= a.cp.size;
    }
    return static_cast<float>(sum / count);
  }
  return static_cast<float>(be.sum(a.losses) / static_cast<double>(a.losses.numel()));
}

// dlogits (in place over the logits) of the loss weighted by dloss.
void loss_backward(const Parts& k, const TpPlace& tp, Activations& a, const int32_t* targets, float dloss) {
  const bool sharded = tp.shape().vocab;
  if (!sharded && !k.cfg.masks_vocab()) {
    k.be.crossentropy_backward(a.logits, a.logits, targets, dloss);
  } else {
    k.be.crossentropy_shard_backward(a.logits, a.logits, a.ce_lse, targets, sharded ? tp.vocab_begin(k.cfg.V) : 0,
                                     k.cfg.valid_vocab(), dloss);
  }
}

// The stage's layers and (on the last stage) the head, after the embedding
// (both forward kinds).
// The unit of id `id` among a model's (a stage holds a contiguous run of them).
const ParamUnit& unit_of(const Gpt2& model, int id) {
  const std::vector<ParamUnit>& u = model.units();
  return u[static_cast<size_t>(id - u.front().id)];
}

// Acquires a unit for the scope of one part of a pass, releases it at the end
// of the scope; nothing without a hook.
class UnitScope {
 public:
  UnitScope(UnitHook* hook, const Gpt2& model, int id, Pass pass)
      : hook_(hook), unit_(hook ? &unit_of(model, id) : nullptr), pass_(pass) {
    if (hook_) hook_->acquire(*unit_, pass_);
  }
  ~UnitScope() { done(); }
  UnitScope(const UnitScope&) = delete;
  UnitScope& operator=(const UnitScope&) = delete;
  void done() {
    if (hook_) hook_->release(*unit_, pass_);
    hook_ = nullptr;
  }

 private:
  UnitHook* hook_;
  const ParamUnit* unit_;
  Pass pass_;
};

// The arena's layers (its chunk) must be the model's: an arena of another
// stage would reach parameters this model does not hold.
void check_chunk(const Gpt2& model, const Activations& a) {
  const StageLayers& held = model.stage();
  const int L = model.config().L;
  if (a.first >= a.last || !held.holds(a.first, L) || !held.holds(a.last - 1, L) || (a.embed && !held.embed) ||
      (a.head && !held.head)) {
    throw std::logic_error(fmt::format("the activations' layers [{}, {}){}{} are not the model's", a.first, a.last,
                                       a.embed ? " with the embedding" : "", a.head ? " with the head" : ""));
  }
}

template <typename AttentionStep>
void layers_forward(const Parts& k, const Gpt2& model, Activations& a, const AttentionStep& attend,
                    UnitHook* units = nullptr) {
  const TpPlace& tp = model.tp();
  const ParamTensors& p = model.params;
  for (int l = a.first; l < a.last; ++l) {
    const UnitScope scope(units, model, 1 + l, Pass::kForward);
    const LayerParams& w = p.layers[static_cast<size_t>(l)];
    LayerActivations& x = a.layers[static_cast<size_t>(l)];
    if (tp.is_private(l)) {
      private_block(k, tp, a, l, w, attend);
    } else if (a.sequence) {
      sequence_parallel_block(k, tp, w, x, a, block_input(a, l), l, attend);
    } else if (k.cfg.post_norm()) {
      post_norm_block(k, tp, w, x, block_input(a, l), a.proj, l, attend);
    } else {
      pre_norm_block(k, tp, w, x, block_input(a, l), a.proj, l, attend);
    }
  }
  if (a.head) {
    const UnitScope scope(units, model, model.config().L + 1, Pass::kForward);
    head_forward(k, tp, p, a);
  }
}

}  // namespace

float gpt2_forward(Backend& be, const Gpt2& model, Activations& a, const int32_t* tokens,
                   const int32_t* targets, int pos0, UnitHook* units) {
  const Gpt2Config& cfg = model.config();
  const ParamTensors& p = model.params;
  const Parts k(be, model);
  if (pos0 != 0 && !cfg.rope()) {
    throw std::invalid_argument("gpt2_forward: a window starting past position 0 needs model.position rope");
  }
  a.pos0 = pos0;
  check_chunk(model, a);
  if (a.embed) {
    const UnitScope scope(units, model, 0, Pass::kForward);
    if (a.sequence) {  // every rank embeds the whole batch (the tables are replicated) and keeps its rows
      const TpPlace& tp = model.tp();
      embed_rows(k, tp, p, a, a.proj, tokens);
      be.copy(a.encoded, rows_of(a.proj, tp, a.encoded));
    } else {
      embed_rows(k, model.tp(), p, a, a.encoded, tokens);
    }
  }
  layers_forward(
      k, model, a,
      [&](int, const LayerParams& w, LayerActivations& x, Tensor in) {
        k.qkv(x.qkv, in, w, pos0, a.cp);
        k.attention(x, a);
      },
      units);
  if (targets == nullptr || !a.head) return 0.0f;
  return loss_forward(k, model.tp(), a, targets);
}

namespace {

// The backward of pre_norm_block. On entry a.dresidual holds d(residual3),
// the same on every rank of the group; on exit d(residual), this block's
// input. The row-parallel biases' gradients come from that replicated
// gradient, so they are equal on every rank; the norm input gradients
// are summed over the group (f's backward) before the norms.
void pre_norm_block_backward(const Parts& k, const TpPlace& tp, const LayerParams& w, LayerParams& dw,
                             LayerActivations& x, Activations& a, Tensor residual,
                             BackwardPart part = BackwardPart::kAll) {
  Backend& be = k.be;
  if (part == BackwardPart::kWeight) {  // W: the four products' weight gradients, from what B kept
    be.matmul_backward(Tensor{}, dw.fc_proj_w, dw.fc_proj_b, x.d_res3, x.fch_gelu, w.fc_proj_w);
    be.matmul_backward(Tensor{}, dw.fc_w, dw.fc_b, x.d_fch, x.ln2, w.fc_w);
    be.matmul_backward(Tensor{}, dw.attn_proj_w, dw.attn_proj_b, x.d_res2, x.atty, w.attn_proj_w);
    be.matmul_backward(Tensor{}, dw.qkv_w, dw.qkv_b, x.d_qkv, x.ln1, w.qkv_w);
    return;
  }
  const bool b_only = part == BackwardPart::kInput;
  // kAll: whole products on the shared scratch. kInput: input gradients
  // only, the products' output gradients kept in the layer's d_* tensors
  // (views of forward tensors this pass has finished with: model/activations.h).
  auto keep = [&](Tensor kept, Tensor from) {
    if (b_only) be.copy(kept, from);
    return b_only ? kept : from;
  };
  auto wgrad = [&](Tensor g) { return b_only ? Tensor{} : g; };
  // dresidual flows unchanged into residual2 and into the MLP projection's output.
  const Tensor d3 = keep(x.d_res3, a.dresidual);
  const Tensor dhid = k.hidden_grad(a);
  be.matmul_backward(dhid, wgrad(dw.fc_proj_w), wgrad(dw.fc_proj_b), d3, x.fch_gelu, w.fc_proj_w);
  // d_fch is fch (but for SwiGLU): the activation's backward reads it, then overwrites it.
  const Tensor dfch = b_only ? x.d_fch : a.dfch;
  k.activation_backward(dfch, dhid, x.fch);
  column_parallel_backward(k, tp, a.dln, wgrad(dw.fc_w), wgrad(dw.fc_b), dfch, x.ln2, w.fc_w, fc_segments(k, w.fc_w));
  k.norm_backward(a.dresidual, dw.ln2_w, dw.ln2_b, a.dln, x.residual2, w.ln2_w, x.ln2_mean, x.ln2_rstd);
  // dresidual now holds d(residual2).
  const Tensor d2 = keep(x.d_res2, a.dresidual);
  be.matmul_backward(a.datty, wgrad(dw.attn_proj_w), wgrad(dw.attn_proj_b), d2, x.atty, w.attn_proj_w);
  k.attention_backward(a.dqkv, a.datty, x, a);
  const Tensor dqkv = keep(x.d_qkv, a.dqkv);  // after the attention backward has read qkv
  column_parallel_backward(k, tp, a.dln, wgrad(dw.qkv_w), wgrad(dw.qkv_b), dqkv, x.ln1, w.qkv_w, qkv_segments(k));
  k.norm_backward(a.dresidual, dw.ln1_w, dw.ln1_b, a.dln, residual, w.ln1_w, x.ln1_mean, x.ln1_rstd);
}

// The sum over the group of the norms' weight (and bias) gradients a
// sequence-parallel rank computed over its rows, added into the model's
// (which accumulate across microbatches, so the sum is taken apart).
// `pairs`: (the model's gradient, its part of a.sp_norm_grads).
void add_norm_grads(const Parts& k, const TpPlace& tp, Activations& a, std::span<const std::pair<Tensor, Tensor>> pairs,
                    int64_t used) {
  tp.group->allreduce_sum(Tensor(a.sp_norm_grads.data, {used}));
  for (const auto& [to, from] : pairs) {
    if (to.data != nullptr) k.be.residual_forward(to, to, from);  // RMSNorm has no biases
  }
}

// Sequence parallelism's column-parallel backward: the weight and bias
// gradients from the gathered input `in`, the input gradient (this rank's
// columns' part) into `dwhole`, its sum over the group reduce-scattered
// into `rows`; with tp.pieces the canonical tree's, as
// column_parallel_backward's.
void sp_column_parallel_backward(const Parts& k, const TpPlace& tp, Tensor dwhole, Tensor dw, Tensor db, Tensor dout,
                                 Tensor in, Tensor w, std::span<const int64_t> segments, Tensor rows) {
  if (tp.pieces == 0) {
    k.be.matmul_backward(dwhole, dw, db, dout, in, w);
    tp.group->reduce_scatter_sum(dwhole, rows);
    return;
  }
  k.be.matmul_backward(Tensor{}, dw, db, dout, in, w);
  k.tree->matmul_backward_input_tree(dwhole, dout, w, segments, tp.pieces / tp.size);
  tp.group->tree_reduce_scatter(dwhole, rows);
}

// A norm's backward under sequence parallelism: the input gradient of this
// rank's rows into `dinp` (+=), and the weight (and bias) gradients. By
// default those come from the rank's rows into `part` (summed over the
// group later, add_norm_grads). Under train.deterministic (tp.pieces) they
// are the model's `grads`, computed whole on every rank in serial's order:
// the rows' output gradient, input and statistics gathered (into `dwhole`,
// `inwhole` and a.sp_stats) and the norm's backward run over every row,
// its input gradient (unused) into a.dfch. `grads` and `part`: weight, bias.
void sp_norm_backward(const Parts& k, const TpPlace& tp, Activations& a, Tensor dinp, std::pair<Tensor, Tensor> grads,
                      std::pair<Tensor, Tensor> part, Tensor drows, Tensor in, Tensor w, Tensor mean, Tensor rstd,
                      Tensor dwhole, Tensor inwhole) {
  const bool rms = k.cfg.rms();
  k.norm_backward(dinp, part.first, rms ? Tensor{} : part.second, drows, in, w, mean, rstd);
  if (tp.pieces == 0) return;  // `part` is summed over the group by the caller
  const int64_t N = dwhole.rows(), C = k.cfg.C;
  if (a.dfch.numel() < N * C) throw std::logic_error("sequence parallelism: dfch is too small for a norm's rows");
  // The head's output gradient is whole on every rank already (`drows` is its rows of `dwhole`).
  if (drows.data != rows_of(dwhole, tp, drows).data) tp.group->all_gather(drows, dwhole);
  tp.group->all_gather(in, inwhole);
  const Tensor mean_whole(a.sp_stats.data, {N}), rstd_whole(a.sp_stats.data + N, {N});
  if (!rms) tp.group->all_gather(mean, mean_whole);
  tp.group->all_gather(rstd, rstd_whole);
  k.norm_backward(Tensor(a.dfch.data, {N, C}), grads.first, grads.second, dwhole, inwhole, w,
                  rms ? Tensor{} : mean_whole, rstd_whole);
}

// The backward of sequence_parallel_block. On entry a.dresidual holds this
// rank's rows of d(residual3); on exit its rows of d(residual). The
// row-parallel products' output gradients are gathered whole (so their
// weight and bias gradients are pre_norm_block_backward's); the
// column-parallel products' input gradients are reduce-scattered to rows.
// Split (zb-h1): B keeps the rows of d(residual3) and d(residual2) (in the
// residuals' places) and the column-parallel products' output gradients
// (as pre_norm_block_backward's B does); W gathers the rows and the norms'
// outputs again for the four products' weight gradients.
void sequence_parallel_block_backward(const Parts& k, const TpPlace& tp, const LayerParams& w, LayerParams& dw,
                                      LayerActivations& x, Activations& a, Tensor residual,
                                      BackwardPart part = BackwardPart::kAll) {
  Backend& be = k.be;
  const int64_t C = k.cfg.C;
  const Tensor whole = a.proj;  // (B,T,C): a row-parallel output's gradient, or a product's input, gathered
  const Tensor ln1 = typed_like(whole, x.ln1), ln2 = typed_like(whole, x.ln2);  // the norms' outputs, gathered
  if (part == BackwardPart::kWeight) {
    tp.group->all_gather(x.d_res3, whole);
    be.matmul_backward(Tensor{}, dw.fc_proj_w, dw.fc_proj_b, whole, x.fch_gelu, w.fc_proj_w);
    tp.group->all_gather(x.ln2, ln2);
    be.matmul_backward(Tensor{}, dw.fc_w, dw.fc_b, x.d_fch, ln2, w.fc_w);
    tp.group->all_gather(x.d_res2, whole);
    be.matmul_backward(Tensor{}, dw.attn_proj_w, dw.attn_proj_b, whole, x.atty, w.attn_proj_w);
    tp.group->all_gather(x.ln1, ln1);
    be.matmul_backward(Tensor{}, dw.qkv_w, dw.qkv_b, x.d_qkv, ln1, w.qkv_w);
    return;
  }
  const bool b_only = part == BackwardPart::kInput;
  auto wgrad = [&](Tensor g) { return b_only ? Tensor{} : g; };
  const Tensor ng(a.sp_norm_grads.data, {4 * C});
  be.zero(ng);
  const Tensor ln1_w(ng.data, {C}), ln1_b(ng.data + C, {C}), ln2_w(ng.data + 2 * C, {C}), ln2_b(ng.data + 3 * C, {C});
  if (b_only) be.copy(x.d_res3, a.dresidual);  // d(residual3)'s rows, for W
  tp.group->all_gather(a.dresidual, whole);  // d(residual3)
  const Tensor dhid = k.hidden_grad(a);
  be.matmul_backward(dhid, wgrad(dw.fc_proj_w), wgrad(dw.fc_proj_b), whole, x.fch_gelu, w.fc_proj_w);
  const Tensor dfch = b_only ? x.d_fch : a.dfch;  // B keeps the fc output's gradient for W (as pre-norm's B)
  k.activation_backward(dfch, dhid, x.fch);
  if (!b_only) tp.group->all_gather(x.ln2, ln2);  // the fc product's input again, for its weight gradient
  sp_column_parallel_backward(k, tp, a.dln, wgrad(dw.fc_w), wgrad(dw.fc_b), dfch, ln2, w.fc_w,
                              fc_segments(k, w.fc_w), a.sp_rows);
  sp_norm_backward(k, tp, a, a.dresidual, {dw.ln2_w, dw.ln2_b}, {ln2_w, ln2_b}, a.sp_rows, x.residual2, w.ln2_w,
                   x.ln2_mean, x.ln2_rstd, a.dln, whole);
  if (b_only) be.copy(x.d_res2, a.dresidual);  // d(residual2)'s rows, for W
  tp.group->all_gather(a.dresidual, whole);  // d(residual2)
  be.matmul_backward(a.datty, wgrad(dw.attn_proj_w), wgrad(dw.attn_proj_b), whole, x.atty, w.attn_proj_w);
  k.attention_backward(a.dqkv, a.datty, x, a);
  if (b_only) be.copy(x.d_qkv, a.dqkv);  // after the attention backward has read qkv
  const Tensor dqkv = b_only ? x.d_qkv : a.dqkv;
  if (!b_only) tp.group->all_gather(x.ln1, ln1);  // the qkv product's input again
  sp_column_parallel_backward(k, tp, a.dln, wgrad(dw.qkv_w), wgrad(dw.qkv_b), dqkv, ln1, w.qkv_w, qkv_segments(k),
                              a.sp_rows);
  sp_norm_backward(k, tp, a, a.dresidual, {dw.ln1_w, dw.ln1_b}, {ln1_w, ln1_b}, a.sp_rows, residual, w.ln1_w,
                   x.ln1_mean, x.ln1_rstd, a.dln, whole);
  if (tp.pieces > 0) return;  // the model's norm gradients are whole already
  const std::pair<Tensor, Tensor> pairs[] = {{dw.ln1_w, ln1_w}, {dw.ln1_b, ln1_b}, {dw.ln2_w, ln2_w}, {dw.ln2_b, ln2_b}};
  add_norm_grads(k, tp, a, pairs, 4 * C);
}

// The backward of post_norm_block (whole passes only: the configuration
// refuses the split schedule with post-norm). On entry a.dresidual holds
// the gradient at the block's output, on exit at its input x.
void post_norm_block_backward(const Parts& k, const TpPlace& tp, const LayerParams& w, LayerParams& dw,
                              LayerActivations& x, Activations& a, Tensor residual) {
  Backend& be = k.be;
  const PostNormRoles v = post_norm_roles(x);
  be.zero(a.dln);
  k.norm_backward(a.dln, dw.ln2_w, dw.ln2_b, a.dresidual, v.r3, w.ln2_w, x.ln2_mean, x.ln2_rstd);  // d(r3)
  const Tensor dhid = k.hidden_grad(a);
  be.matmul_backward(dhid, dw.fc_proj_w, dw.fc_proj_b, a.dln, x.fch_gelu, w.fc_proj_w);
  k.activation_backward(a.dfch, dhid, x.fch);
  be.matmul_backward(a.dresidual, dw.fc_w, dw.fc_b, a.dfch, v.h, w.fc_w);
  tp_sum(tp, a.dresidual);
  be.residual_forward(a.dresidual, a.dresidual, a.dln);  // d(h): through the MLP and around it
  be.zero(a.dln);
  k.norm_backward(a.dln, dw.ln1_w, dw.ln1_b, a.dresidual, v.r2, w.ln1_w, x.ln1_mean, x.ln1_rstd);  // d(r2)
  be.matmul_backward(a.datty, dw.attn_proj_w, dw.attn_proj_b, a.dln, x.atty, w.attn_proj_w);
  k.attention_backward(a.dqkv, a.datty, x, a);
  be.matmul_backward(a.dresidual, dw.qkv_w, dw.qkv_b, a.dqkv, residual, w.qkv_w);
  tp_sum(tp, a.dresidual);
  be.residual_forward(a.dresidual, a.dresidual, a.dln);  // d(x): through the attention and around it
}

// The six small gradients of a private layer (its LayerNorms and its
// row-parallel biases), accumulated in a.drun behind the stream gradient
// while the run runs backward, and summed over the group with it.
struct RunGrads {
  Tensor ln1_w, ln1_b, attn_proj_b, ln2_w, ln2_b, fc_proj_b;
};

// Layer l's, at its place in its run (k = l - start: behind the stream gradient).
RunGrads run_grads(Activations& a, int k, int64_t C) {
  float* base = a.drun.data + a.B * a.T * C + 6 * C * k;
  auto at = [&](int k) { return Tensor(base + k * C, {C}); };
  return {at(0), at(1), at(2), at(3), at(4), at(5)};
}

// The backward of private_block. a.dresidual holds G, the gradient at the
// run's output (the same on every rank), during the whole run; ds (the
// front of a.drun) is this rank's stream gradient, zero at the run's end.
// Every partial output a_i, m_i receives G + ds; a bias receives ds, and on
// rank 0 also G (its partial outputs carried the biases). At the run's first
// layer the stream gradients and the small gradients are summed over the
// group in one call, and dresidual becomes G + sum ds: d(x).
void private_block_backward(const Parts& k, Gpt2& model, Activations& a, int l) {
  Backend& be = k.be;
  const TpPlace& tp = model.tp();
  const int64_t C = model.config().C;
  const LayerParams& w = model.params.layers[static_cast<size_t>(l)];
  LayerParams& dw = model.grads.layers[static_cast<size_t>(l)];
  LayerActivations& x = a.layers[static_cast<size_t>(l)];
  const bool root = tp.rank == 0, end = tp.ends_run(l);
  const Tensor G = a.dresidual, ds(a.drun.data, {a.B, a.T, C});
  const int start = tp.run_start(l);
  // The run's part of drun: the stream gradient and 6 x C per layer of the run.
  const Tensor run_part(a.drun.data, {a.B * a.T * C + 6 * C * (l - start + 1)});
  const RunGrads g = run_grads(a, l - start, C);
  if (end) be.zero(run_part);  // the stream's end feeds nothing, and the run's small gradients start at 0
  Tensor dm = G;  // d(m_i) = G + ds, in dln (free until the fc backward writes it)
  if (!end) {
    be.residual_forward(a.dln, G, ds);
    dm = a.dln;
    if (!root) bias_rows_backward(be, g.fc_proj_b, a.proj, ds, a.zero_rows);
  }
  const Tensor dhid = k.hidden_grad(a);
  be.matmul_backward(dhid, dw.fc_proj_w, root ? g.fc_proj_b : Tensor{}, dm, x.fch_gelu, w.fc_proj_w);
  k.activation_backward(a.dfch, dhid, x.fch);
  be.matmul_backward(a.dln, dw.fc_w, dw.fc_b, a.dfch, x.ln2, w.fc_w);
  k.norm_backward(ds, g.ln2_w, g.ln2_b, a.dln, x.residual2, w.ln2_w, x.ln2_mean, x.ln2_rstd);
  // ds now holds d(u); d(a_i) = G + d(u).
  be.residual_forward(a.dln, G, ds);
  if (!root) bias_rows_backward(be, g.attn_proj_b, a.proj, ds, a.zero_rows);
  be.matmul_backward(a.datty, dw.attn_proj_w, root ? g.attn_proj_b : Tensor{}, a.dln, x.atty, w.attn_proj_w);
  k.attention_backward(a.dqkv, a.datty, x, a);
  be.matmul_backward(a.dln, dw.qkv_w, Tensor{}, a.dqkv, x.ln1, w.qkv_w);
  k.norm_backward(ds, g.ln1_w, g.ln1_b, a.dln, block_input(a, l), w.ln1_w, x.ln1_mean, x.ln1_rstd);
  // ds now holds d(s), this rank's share of the gradient at the layer's input.
  if (l != start) return;
  int end_layer = start;
  while (!tp.ends_run(end_layer)) ++end_layer;
  tp_sum(tp, Tensor(a.drun.data, {a.B * a.T * C + 6 * C * (end_layer - start + 1)}));
  for (int k = start; k <= end_layer; ++k) {
    LayerParams& d = model.grads.layers[static_cast<size_t>(k)];
    const RunGrads r = run_grads(a, k - start, C);
    for (auto [to, from] : {std::pair{d.ln1_w, r.ln1_w}, {d.ln1_b, r.ln1_b}, {d.attn_proj_b, r.attn_proj_b},
                            {d.ln2_w, r.ln2_w}, {d.ln2_b, r.ln2_b}, {d.fc_proj_b, r.fc_proj_b}}) {
      if (to.data != nullptr) be.residual_forward(to, to, from);  // RMSNorm has no biases
    }
  }
  be.residual_forward(a.dresidual, a.dresidual, ds);
}

}  // namespace

namespace {

// Recomputation (Activations::recompute): layer l's forward again, from its
// kept input into the tensors every layer shares, with the forward's kernels
// on the forward's inputs: the same bits as the first time.
void recompute_layer(const Parts& k, const Gpt2& model, Activations& a, int l) {
  const LayerParams& w = model.params.layers[static_cast<size_t>(l)];
  LayerActivations& x = a.layers[static_cast<size_t>(l)];
  const auto attend = [&](int, const LayerParams& lw, LayerActivations& lx, Tensor in) {
    k.qkv(lx.qkv, in, lw, a.pos0, a.cp);
    k.attention(lx, a);
  };
  if (a.sequence) {
    sequence_parallel_block(k, model.tp(), w, x, a, block_input(a, l), l, attend);
  } else if (k.cfg.post_norm()) {
    post_norm_block(k, model.tp(), w, x, block_input(a, l), a.proj, l, attend);
  } else {
    pre_norm_block(k, model.tp(), w, x, block_input(a, l), a.proj, l, attend);
  }
}

// train.sequence_pieces at a backward's end (kernels/sequence_pieces.h):
// under context parallelism every gradient this rank wrote is its subtree
// of the pair tree, finished over the group by the tree's sum (the whole
// bound buffer; a position row or a token row another rank's pairs do not
// reach adds zeros, exactly); a tied head's part of wte's gradient is a
// tree of its own, finished apart, then added to the embedding's.
void finish_pieces(Backend& be, Gpt2& model, Activations& a, bool head_apart) {
  const Tensor wte = model.grads.wte;
  const Tensor head = head_apart ? Tensor(a.piece_buffers.head.data(), {wte.dim(0), wte.dim(1)}) : Tensor{};
  if (a.cp.on()) {
    a.cp.group->tree_sum(Tensor(model.bound_grads(), {static_cast<int64_t>(model.num_params())}));
    if (head_apart) a.cp.group->tree_sum(head);
  }
  if (head_apart) be.residual_forward(wte, wte, head);
}

}  // namespace

void gpt2_backward(Backend& be, Gpt2& model, Activations& a, const int32_t* tokens,
                   const int32_t* targets, float dloss, GradReadyHook* hook, BackwardPart part,
                   UnitHook* units) {
  const Gpt2Config& cfg = model.config();
  const TpPlace& tp = model.tp();
  check_chunk(model, a);
  const Activations& stage = a;  // the arena's chunk of layers: [first, last), the embedding, the head
  const Parts k(be, model);
  const ParamTensors& p = model.params;
  ParamTensors& g = model.grads;
  if (part != BackwardPart::kAll) {
    hook = nullptr;
    units = nullptr;
  }
  if (part != BackwardPart::kAll && cfg.post_norm()) {
    throw std::invalid_argument("gpt2_backward: the split backward (zb-h1) needs pre-norm blocks");
  }
  // Offset of a gradient view in the flat buffer: what `hook` is told.
  auto done_from = [&](const Tensor& first) {
    if (hook) hook->ready(static_cast<size_t>(first.data - model.grad_data()));
  };
  Tensor dlogits = a.logits;  // written in place over the logits
  if (part == BackwardPart::kWeight) {
    if (stage.head) be.matmul_backward(Tensor{}, Parts::head(cfg, g), Tensor{}, dlogits, a.lnf, Parts::head(cfg, p));
    for (int l = stage.last - 1; l >= stage.first; --l) {
      if (tp.is_private(l)) continue;  // done whole in B
      if (a.sequence) {
        sequence_parallel_block_backward(k, tp, p.layers[static_cast<size_t>(l)], g.layers[static_cast<size_t>(l)],
                                         a.layers[static_cast<size_t>(l)], a, Tensor{}, part);
        continue;
      }
      pre_norm_block_backward(k, tp, p.layers[static_cast<size_t>(l)], g.layers[static_cast<size_t>(l)],
                              a.layers[static_cast<size_t>(l)], a, Tensor{}, part);
    }
    return;
  }
  // train.sequence_pieces with a tied head: the head's part of wte's gradient is a pair tree of its own,
  // finished apart from the embedding's and added to it at the end (finish_pieces).
  PieceOps* const pieces = k.pieces_in(a);
  const bool head_apart = pieces != nullptr && cfg.tie_embeddings && stage.head;
  if (stage.head) {
    const UnitScope scope(units, model, cfg.L + 1, Pass::kBackward);  // binds the head's views
    const Tensor head_w = Parts::head(cfg, p);
    Tensor head_g = Parts::head(cfg, g);
    if (head_apart) {
      a.piece_buffers.head.assign(static_cast<size_t>(head_g.numel()), 0.0f);
      head_g = Tensor(a.piece_buffers.head.data(), {head_g.dim(0), head_g.dim(1)});
    }
    loss_backward(k, tp, a, targets, dloss);
    be.matmul_backward(a.dln, part == BackwardPart::kAll ? head_g : Tensor{}, Tensor{}, dlogits, a.lnf, head_w);
    if (tp.shape().vocab) tp_sum(tp, a.dln);  // each rank's vocabulary rows gave a part of it
    be.zero(a.dresidual);  // every norm backward below accumulates into it
    Tensor last = a.layers[static_cast<size_t>(stage.last - 1)].residual3;
    if (a.sequence) {  // the whole d(lnf) is on every rank (the head is replicated): this rank's rows of it
      const int64_t C = cfg.C;
      const Tensor mine = rows_of(a.dln, tp, a.dresidual);
      const Tensor w(a.sp_norm_grads.data, {C}), b(a.sp_norm_grads.data + C, {C});
      be.zero(Tensor(a.sp_norm_grads.data, {2 * C}));
      sp_norm_backward(k, tp, a, a.dresidual, {g.lnf_w, g.lnf_b}, {w, b}, mine, last, p.lnf_w, a.lnf_mean,
                       a.lnf_rstd, a.dln, a.proj);
      const std::pair<Tensor, Tensor> pairs[] = {{g.lnf_w, w}, {g.lnf_b, b}};
      if (tp.pieces == 0) add_norm_grads(k, tp, a, pairs, 2 * C);
    } else {
      k.norm_backward(a.dresidual, g.lnf_w, g.lnf_b, a.dln, last, p.lnf_w, a.lnf_mean, a.lnf_rstd);
    }
    done_from(g.lnf_w);
  }  // else a.dresidual holds the gradient at the stage's output, as the caller received it
  for (int l = stage.last - 1; l >= stage.first; --l) {
    const UnitScope scope(units, model, 1 + l, Pass::kBackward);
    const LayerParams& w = p.layers[static_cast<size_t>(l)];
    LayerParams& dw = g.layers[static_cast<size_t>(l)];
    LayerActivations& x = a.layers[static_cast<size_t>(l)];
    if (tp.is_private(l)) {
      private_block_backward(k, model, a, l);
      if (tp.run_start(l) == l) done_from(dw.ln1_w);  // the run's gradients are final once summed
    } else {
      // The stage's last layer still holds its tensors from the forward.
      if (a.recompute && l != stage.last - 1) recompute_layer(k, model, a, l);
      if (a.sequence) sequence_parallel_block_backward(k, tp, w, dw, x, a, block_input(a, l), part);
      else if (cfg.post_norm()) post_norm_block_backward(k, tp, w, dw, x, a, block_input(a, l));
      else pre_norm_block_backward(k, tp, w, dw, x, a, block_input(a, l), part);
      done_from(dw.ln1_w);  // dresidual now holds d(residual), the block's input
    }
  }
  if (stage.embed) {
    const UnitScope scope(units, model, 0, Pass::kBackward);
    if (cfg.rope()) be.zero(a.dpos);  // no position table: its gradient is dropped
    // With the vocabulary sharded, the forward's ids of this rank's rows; every
    // rank's position gradient is whole (the gradient at the sum is replicated).
    const int32_t* ids = tp.shape().vocab ? a.vocab_ids.data() : tokens;
    // Sequence parallelism: every rank's rows gathered, so each computes the replicated tables' whole gradient.
    if (a.sequence) tp.group->all_gather(a.dresidual, a.proj);
    const Tensor d = a.sequence ? a.proj : a.dresidual;
    // train.sequence_pieces: the position rows here (each position is one pair's: no sum across pairs), the
    // token table's gradient as the pair tree below.
    const Tensor token_rows = pieces != nullptr ? Tensor{} : g.wte;
    if (a.cp.on()) {  // each half of the arena into its chunk's position rows
      const int64_t n = int64_t{a.B} / 2 * a.T;
      for (int part = 0; part < 2; ++part) {
        const Tensor pos_rows = cfg.rope() ? a.dpos : Tensor(g.wpe.data + int64_t{a.cp.chunk(part)} * a.T * cfg.C,
                                                             {a.T, cfg.C});
        be.encoder_backward(token_rows, pos_rows, context_half(d, part), ids + part * n);
      }
    } else {
      be.encoder_backward(token_rows, cfg.rope() ? a.dpos : g.wpe, d, ids);
    }
    if (pieces != nullptr) pieces->embedding_pieces_backward(g.wte, d, ids);
    done_from(g.wte);
  }  // else a.dresidual holds the gradient at the stage's input, for the caller to send back
  if (pieces != nullptr) finish_pieces(be, model, a, head_apart);
}

void gpt2_decode(Backend& be, const Gpt2& model, Activations& a, const std::vector<Tensor>& qkv_cache,
                 int32_t token, int row, int position) {
  const Gpt2Config& cfg = model.config();
  const ParamTensors& p = model.params;
  const Parts k(be, model);
  if (position < 0) position = row;
  if (!model.stage().whole(cfg.L)) {
    throw std::invalid_argument("gpt2_decode: generation runs on a whole model, not on one pipeline stage");
  }
  if (position != row && !cfg.rope()) {
    throw std::invalid_argument("gpt2_decode: a cache row apart from the token's position needs model.position rope");
  }
  // The position embedding row `position` as a (1,C) table: the encoder adds its row 0.
  embed(k, model.tp(), p, a, a.encoded, &token, position);
  layers_forward(k, model, a, [&](int l, const LayerParams& w, LayerActivations& x, Tensor in) {
    const Tensor& cache = qkv_cache[static_cast<size_t>(l)];  // (1,T,qkv width/P)
    const int64_t width = cache.dim(2);
    k.qkv(Tensor(cache.data + row * width, {1, 1, width}), in, w, position);
    be.attention_decode(x.atty, Tensor(cache.data, {1, row + 1, width}), k.NH, k.KVH);
  });
}

}  // namespace gpt2
