#include "model/model.h"

namespace gpt2 {

namespace {
// The block after its attention output x.atty: projection, residual, MLP,
// residual. Shared by the full forward and the one-token decode.
void block_tail(Backend& be, const LayerParams& w, LayerActivations& x, Tensor residual, Tensor proj) {
  be.matmul_forward(proj, x.atty, w.attn_proj_w, w.attn_proj_b);
  be.residual_forward(x.residual2, residual, proj);
  be.layernorm_forward(x.ln2, x.ln2_mean, x.ln2_rstd, x.residual2, w.ln2_w, w.ln2_b);
  be.matmul_forward(x.fch, x.ln2, w.fc_w, w.fc_b);
  be.gelu_forward(x.fch_gelu, x.fch);
  be.matmul_forward(proj, x.fch_gelu, w.fc_proj_w, w.fc_proj_b);
  be.residual_forward(x.residual3, x.residual2, proj);
}

void head_forward(Backend& be, const ParamTensors& p, Activations& a) {
  be.layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, a.layers.back().residual3, p.lnf_w, p.lnf_b);
  be.matmul_forward(a.logits, a.lnf, p.lm_head, Tensor{});
}

Tensor block_input(Activations& a, int l) {
  return l == 0 ? a.encoded : a.layers[static_cast<size_t>(l - 1)].residual3;
}
}  // namespace

float gpt2_forward(Backend& be, const Gpt2& model, Activations& a, const int32_t* tokens,
                   const int32_t* targets) {
  const Gpt2Config& cfg = model.config();
  const ParamTensors& p = model.params;
  be.encoder_forward(a.encoded, tokens, p.wte, p.wpe);
  for (int l = 0; l < cfg.L; ++l) {
    const LayerParams& w = p.layers[static_cast<size_t>(l)];
    LayerActivations& x = a.layers[static_cast<size_t>(l)];
    Tensor residual = block_input(a, l);
    be.layernorm_forward(x.ln1, x.ln1_mean, x.ln1_rstd, residual, w.ln1_w, w.ln1_b);
    be.matmul_forward(x.qkv, x.ln1, w.qkv_w, Tensor{});
    be.attention_forward(x.atty, x.att_lse, x.qkv, cfg.NH);
    block_tail(be, w, x, residual, a.proj);
  }
  head_forward(be, p, a);
  if (targets == nullptr) return 0.0f;
  be.crossentropy_forward(a.losses, a.logits, targets);
  return static_cast<float>(be.sum(a.losses) / static_cast<double>(a.losses.numel()));
}

void gpt2_backward(Backend& be, Gpt2& model, Activations& a, const int32_t* tokens,
                   const int32_t* targets, float dloss, GradReadyHook* hook) {
  const Gpt2Config& cfg = model.config();
  const ParamTensors& p = model.params;
  ParamTensors& g = model.grads;
  // Offset of a gradient view in the flat buffer: what `hook` is told.
  auto done_from = [&](const Tensor& first) {
    if (hook) hook->ready(static_cast<size_t>(first.data - model.grad_data()));
  };
  Tensor dlogits = a.logits;  // written in place over the logits
  be.crossentropy_backward(dlogits, a.logits, targets, dloss);
  be.matmul_backward(a.dln, g.lm_head, Tensor{}, dlogits, a.lnf, p.lm_head);
  be.zero(a.dresidual);  // every layernorm_backward below accumulates into it
  Tensor last = a.layers.back().residual3;
  be.layernorm_backward(a.dresidual, g.lnf_w, g.lnf_b, a.dln, last, p.lnf_w, a.lnf_mean, a.lnf_rstd);
  done_from(g.lnf_w);
  for (int l = cfg.L - 1; l >= 0; --l) {
    const LayerParams& w = p.layers[static_cast<size_t>(l)];
    LayerParams& dw = g.layers[static_cast<size_t>(l)];
    LayerActivations& x = a.layers[static_cast<size_t>(l)];
    Tensor residual = block_input(a, l);
    // dresidual holds d(residual3) here; it flows unchanged into residual2 and
    // into the MLP projection's output (the residual add's backward).
    be.matmul_backward(a.dfch, dw.fc_proj_w, dw.fc_proj_b, a.dresidual, x.fch_gelu, w.fc_proj_w);
    be.gelu_backward(a.dfch, a.dfch, x.fch);
    be.matmul_backward(a.dln, dw.fc_w, dw.fc_b, a.dfch, x.ln2, w.fc_w);
    be.layernorm_backward(a.dresidual, dw.ln2_w, dw.ln2_b, a.dln, x.residual2, w.ln2_w, x.ln2_mean,
                          x.ln2_rstd);
    // dresidual now holds d(residual2).
    be.matmul_backward(a.datty, dw.attn_proj_w, dw.attn_proj_b, a.dresidual, x.atty, w.attn_proj_w);
    be.attention_backward(a.dqkv, a.datty, x.atty, x.att_lse, x.qkv, cfg.NH);
    be.matmul_backward(a.dln, dw.qkv_w, Tensor{}, a.dqkv, x.ln1, w.qkv_w);
    be.layernorm_backward(a.dresidual, dw.ln1_w, dw.ln1_b, a.dln, residual, w.ln1_w, x.ln1_mean,
                          x.ln1_rstd);
    // dresidual now holds d(residual), the block's input.
    done_from(dw.ln1_w);
  }
  be.encoder_backward(g.wte, g.wpe, a.dresidual, tokens);
  done_from(g.wte);
}

void gpt2_decode(Backend& be, const Gpt2& model, Activations& a, const std::vector<Tensor>& qkv_cache,
                 int32_t token, int pos) {
  const Gpt2Config& cfg = model.config();
  const ParamTensors& p = model.params;
  const int64_t C = cfg.C;
  // The position embedding row `pos` as a (1,C) table: the encoder adds its row 0.
  be.encoder_forward(a.encoded, &token, p.wte, Tensor(p.wpe.data + pos * C, {1, C}));
  for (int l = 0; l < cfg.L; ++l) {
    const LayerParams& w = p.layers[static_cast<size_t>(l)];
    LayerActivations& x = a.layers[static_cast<size_t>(l)];
    const Tensor& cache = qkv_cache[static_cast<size_t>(l)];  // (1,T,3C)
    Tensor residual = block_input(a, l);
    be.layernorm_forward(x.ln1, x.ln1_mean, x.ln1_rstd, residual, w.ln1_w, w.ln1_b);
    be.matmul_forward(Tensor(cache.data + pos * 3 * C, {1, 1, 3 * C}), x.ln1, w.qkv_w, Tensor{});
    be.attention_decode(x.atty, Tensor(cache.data, {1, pos + 1, 3 * C}), cfg.NH);
    block_tail(be, w, x, residual, a.proj);
  }
  head_forward(be, p, a);
}

}  // namespace gpt2
