// The reference backend: the Backend interface over the naive float kernels
// of reference_kernels.h. Whole-model runs on it are the slow oracle that the
// optimised backends are compared with.
#include <vector>

#include "kernels/backend.h"
#include "kernels/reference/reference_kernels.h"

namespace gpt2 {
namespace {

int i32(int64_t n) { return static_cast<int>(n); }

// The reference meaning of a bf16 tensor (kernels/backend.h): an input is
// its exact float values; an output is the float result rounded once to
// nearest even. The naive kernels stay float; these adapt their arguments.
const float* widened(Tensor t, std::vector<float>& copy) {
  if (!t.is_bf16()) return t.data;
  const bf16* b = t.as<bf16>();
  copy.resize(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < copy.size(); ++i) copy[i] = to_float(b[i]);
  return copy.data();
}

template <typename F>
void rounded_into(Tensor out, F&& compute) {
  if (!out.is_bf16()) {
    compute(out.data);
    return;
  }
  std::vector<float> full(static_cast<size_t>(out.numel()));
  compute(full.data());
  bf16* b = out.as<bf16>();
  for (size_t i = 0; i < full.size(); ++i) b[i] = to_bf16(full[i]);
}

class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }
  bool accepts_bf16() const override { return true; }

  void zero(Tensor x) override {
    for (float& f : x) f = 0.0f;
  }
  void copy(Tensor dst, Tensor src) override {
    for (int64_t i = 0; i < src.numel(); ++i) dst.data[i] = src.data[i];
  }

  void encoder_forward(Tensor out, const int32_t* tokens, Tensor wte, Tensor wpe) override {
    ref::encoder_forward(out.data, tokens, wte.data, wpe.data, i32(out.dim(0)), i32(out.dim(1)),
                         i32(out.dim(2)));
  }
  void encoder_backward(Tensor dwte, Tensor dwpe, Tensor dout, const int32_t* tokens) override {
    ref::encoder_backward(dwte.data, dwpe.data, dout.data, tokens, i32(dout.dim(0)), i32(dout.dim(1)),
                          i32(dout.dim(2)));
  }
  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                         Tensor bias) override {
    rounded_into(out, [&](float* o) {
      ref::layernorm_forward(o, mean.data, rstd.data, inp.data, weight.data, bias.data, i32(inp.rows()),
                             i32(inp.cols()));
    });
  }
  void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                          Tensor weight, Tensor mean, Tensor rstd) override {
    ref::layernorm_backward(dinp.data, dweight.data, dbias.data, dout.data, inp.data, weight.data,
                            mean.data, rstd.data, i32(inp.rows()), i32(inp.cols()));
  }
  void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight) override {
    rounded_into(out, [&](float* o) {
      ref::rmsnorm_forward(o, rstd.data, inp.data, weight.data, i32(inp.rows()), i32(inp.cols()));
    });
  }
  void rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight,
                        Tensor rstd) override {
    ref::rmsnorm_backward(dinp.data, dweight.data, dout.data, inp.data, weight.data, rstd.data, i32(inp.rows()),
                          i32(inp.cols()));
  }
  void matmul_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) override {
    std::vector<float> in;
    ref::matmul_forward(out.data, widened(inp, in), weight.data, bias.data, i32(inp.rows()), i32(inp.cols()),
                        i32(weight.dim(0)));
  }
  void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                       Tensor weight) override {
    std::vector<float> in;
    ref::matmul_backward(dinp.data, dweight.data, dbias.data, dout.data, widened(inp, in), weight.data,
                         i32(inp.rows()), i32(inp.cols()), i32(weight.dim(0)));
  }
  // C = NH * HS is out's (dout's) width; qkv rows are (NH + 2 KVH) HS wide.
  void attention_forward(Tensor out, Tensor lse, Tensor qkv, int NH, int KVH) override {
    rounded_into(out, [&](float* o) {
      ref::attention_forward(o, lse.data, qkv.data, i32(qkv.dim(0)), i32(qkv.dim(1)), i32(out.dim(2)), NH, KVH);
    });
  }
  void attention_backward(Tensor dqkv, Tensor dout, Tensor /*out*/, Tensor /*lse*/, Tensor qkv, int NH,
                          int KVH) override {
    ref::attention_backward(dqkv.data, dout.data, qkv.data, i32(qkv.dim(0)), i32(qkv.dim(1)), i32(dout.dim(2)), NH,
                            KVH);
  }
  void attention_decode(Tensor out, Tensor qkv, int NH, int KVH) override {
    expect_f32(out, "attention_decode");
    ref::attention_decode(out.data, qkv.data, i32(qkv.dim(1)), i32(out.dim(2)), NH, KVH);
  }
  void attention_block_forward(Tensor out, Tensor lse, Tensor qkv, Tensor kv, int NH, int KVH, bool causal,
                               bool merge) override {
    expect_f32(out, "attention_block_forward");
    ref::attention_block_forward(out.data, lse.data, qkv.data, kv.data, i32(qkv.dim(0)), i32(qkv.dim(1)),
                                 i32(out.dim(2)), NH, KVH, causal, merge);
  }
  void attention_block_backward(Tensor dqkv, Tensor dkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv, Tensor kv,
                                int NH, int KVH, bool causal) override {
    expect_f32(out, "attention_block_backward");
    ref::attention_block_backward(dqkv.data, dkv.data, dout.data, out.data, lse.data, qkv.data, kv.data,
                                  i32(qkv.dim(0)), i32(qkv.dim(1)), i32(dout.dim(2)), NH, KVH, causal);
  }
  void attention_kv_pack(Tensor kv, Tensor qkv, int NH, int KVH) override { host_kv_columns(kv, qkv, NH, KVH, false); }
  void attention_kv_unpack(Tensor dqkv, Tensor dkv, int NH, int KVH) override {
    host_kv_columns(dkv, dqkv, NH, KVH, true);
  }
  void rope_forward(Tensor qkv, int NH, int KVH, int pos0, float theta) override {
    ref::rope_forward(qkv.data, i32(qkv.dim(0)), i32(qkv.dim(1)), NH, KVH, i32(qkv.dim(2) / (NH + 2 * KVH)), pos0,
                      theta);
  }
  void rope_backward(Tensor dqkv, int NH, int KVH, int pos0, float theta) override {
    ref::rope_backward(dqkv.data, i32(dqkv.dim(0)), i32(dqkv.dim(1)), NH, KVH, i32(dqkv.dim(2) / (NH + 2 * KVH)),
                       pos0, theta);
  }
  void gelu_forward(Tensor out, Tensor inp) override {
    rounded_into(out, [&](float* o) { ref::gelu_forward(o, inp.data, inp.numel()); });
  }
  void gelu_backward(Tensor dinp, Tensor dout, Tensor inp) override {
    ref::gelu_backward(dinp.data, dout.data, inp.data, inp.numel());
  }
  void relu_forward(Tensor out, Tensor inp) override {
    rounded_into(out, [&](float* o) { ref::relu_forward(o, inp.data, inp.numel()); });
  }
  void relu_backward(Tensor dinp, Tensor dout, Tensor inp) override {
    ref::relu_backward(dinp.data, dout.data, inp.data, inp.numel());
  }
  void silu_forward(Tensor out, Tensor inp) override {
    rounded_into(out, [&](float* o) { ref::silu_forward(o, inp.data, inp.numel()); });
  }
  void silu_backward(Tensor dinp, Tensor dout, Tensor inp) override {
    ref::silu_backward(dinp.data, dout.data, inp.data, inp.numel());
  }
  void swiglu_forward(Tensor out, Tensor inp) override {
    rounded_into(out, [&](float* o) { ref::swiglu_forward(o, inp.data, i32(out.rows()), i32(out.cols())); });
  }
  void swiglu_backward(Tensor dinp, Tensor dout, Tensor inp) override {
    ref::swiglu_backward(dinp.data, dout.data, inp.data, i32(dout.rows()), i32(dout.cols()));
  }
  void residual_forward(Tensor out, Tensor a, Tensor b) override {
    ref::residual_forward(out.data, a.data, b.data, a.numel());
  }
  void crossentropy_forward(Tensor losses, Tensor logits, const int32_t* targets) override {
    ref::crossentropy_forward(losses.data, logits.data, targets, i32(logits.rows()), i32(logits.cols()));
  }
  void crossentropy_backward(Tensor dlogits, Tensor logits, const int32_t* targets,
                             float dloss) override {
    ref::crossentropy_backward(dlogits.data, logits.data, targets, dloss, i32(logits.rows()),
                               i32(logits.cols()));
  }
  void crossentropy_shard_stats(Tensor lse, Tensor target_logit, Tensor logits, const int32_t* targets, int64_t v0,
                                int64_t vocab) override {
    ref::crossentropy_shard_stats(lse.data, target_logit.data, logits.data, targets, i32(logits.rows()),
                                  i32(logits.cols()), v0, vocab);
  }
  void crossentropy_shard_combine(Tensor losses, Tensor lse, Tensor parts) override {
    ref::crossentropy_shard_combine(losses.data, lse.data, parts.data, i32(parts.dim(0) - 1), i32(parts.dim(1)));
  }
  void crossentropy_shard_backward(Tensor dlogits, Tensor logits, Tensor lse, const int32_t* targets, int64_t v0,
                                   int64_t vocab, float dloss) override {
    ref::crossentropy_shard_backward(dlogits.data, logits.data, lse.data, targets, dloss, i32(logits.rows()),
                                     i32(logits.cols()), v0, vocab);
  }
  void adam_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamCoefficients& k) override {
    ref::adam_update(param.data, grad.data, m.data, v.data, param.numel(), k.beta1, k.beta2, k.eps,
                     k.step_size, k.v_scale, k.decay_factor, k.grad_scale);
  }
  double sum_squares(Tensor x) override { return ref::sum_squares(x.data, x.numel()); }
  double sum(Tensor x) override { return sum_in_order(x); }
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace gpt2
