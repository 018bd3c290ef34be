#include "model/params.h"

#include <fmt/format.h>

#include "model/rng.h"

namespace gpt2 {

std::vector<ParamInfo> layout(const Gpt2Config& cfg, ParamTensors& p) {
  const int64_t V = cfg.V, T = cfg.T, C = cfg.C;
  std::vector<ParamInfo> out;
  auto add = [&out](std::string name, Tensor& view, std::vector<int64_t> shape, ParamInit init) {
    bool decay = shape.size() >= 2;
    out.push_back({std::move(name), &view, std::move(shape), init, decay, 0});
  };
  p.layers.resize(static_cast<size_t>(cfg.L));
  add("wte", p.wte, {V, C}, ParamInit::kNormal);
  add("wpe", p.wpe, {T, C}, ParamInit::kNormal);
  for (int l = 0; l < cfg.L; ++l) {
    LayerParams& h = p.layers[static_cast<size_t>(l)];
    auto name = [l](const char* s) { return fmt::format("h.{}.{}", l, s); };
    add(name("ln1_w"), h.ln1_w, {C}, ParamInit::kOne);
    add(name("ln1_b"), h.ln1_b, {C}, ParamInit::kZero);
    add(name("qkv_w"), h.qkv_w, {3 * C, C}, ParamInit::kNormal);
    add(name("attn_proj_w"), h.attn_proj_w, {C, C}, ParamInit::kNormal);
    add(name("attn_proj_b"), h.attn_proj_b, {C}, ParamInit::kZero);
    add(name("ln2_w"), h.ln2_w, {C}, ParamInit::kOne);
    add(name("ln2_b"), h.ln2_b, {C}, ParamInit::kZero);
    add(name("fc_w"), h.fc_w, {4 * C, C}, ParamInit::kNormal);
    add(name("fc_b"), h.fc_b, {4 * C}, ParamInit::kZero);
    add(name("fc_proj_w"), h.fc_proj_w, {C, 4 * C}, ParamInit::kNormal);
    add(name("fc_proj_b"), h.fc_proj_b, {C}, ParamInit::kZero);
  }
  add("lnf_w", p.lnf_w, {C}, ParamInit::kOne);
  add("lnf_b", p.lnf_b, {C}, ParamInit::kZero);
  add("lm_head", p.lm_head, {V, C}, ParamInit::kNormal);

  size_t offset = 0;
  for (ParamInfo& info : out) {
    info.offset = offset;
    size_t n = 1;
    for (int64_t d : info.shape) n *= static_cast<size_t>(d);
    offset += n;
  }
  return out;
}

size_t param_count(const Gpt2Config& cfg) {
  ParamTensors scratch;
  auto infos = layout(cfg, scratch);
  size_t n = 1;
  for (int64_t d : infos.back().shape) n *= static_cast<size_t>(d);
  return infos.back().offset + n;
}

namespace {
void bind(std::vector<ParamInfo>& infos, float* base) {
  for (ParamInfo& info : infos) {
    Tensor& t = *info.view;
    t = Tensor(base + info.offset, {});
    for (int64_t d : info.shape) t.shape[static_cast<size_t>(t.ndim++)] = d;
  }
}
}  // namespace

ParamTensors bind_params(const Gpt2Config& cfg, float* base) {
  ParamTensors p;
  auto infos = layout(cfg, p);
  bind(infos, base);
  return p;
}

Gpt2::Gpt2(const Gpt2Config& cfg, Memory& memory) : cfg_(cfg) {
  cfg_.validate();
  size_t n = param_count(cfg_);
  params_buf_ = Buffer(n, memory);
  grads_buf_ = Buffer(n, memory);
  grads = bind_params(cfg_, grads_buf_.data());
  infos_ = layout(cfg_, params);
  bind(infos_, params_buf_.data());
}

void Gpt2::init_weights(uint64_t seed) {
  // Filled on the host, then copied to the model's memory in one piece.
  std::vector<float> host(num_params());
  for (size_t k = 0; k < infos_.size(); ++k) {
    const ParamInfo& info = infos_[k];
    float* t = host.data() + info.offset;
    const int64_t n = info.view->numel();
    switch (info.init) {
      case ParamInit::kNormal:
        for (int64_t i = 0; i < n; ++i) t[i] = 0.02f * normal(seed, static_cast<uint32_t>(k), static_cast<uint64_t>(i));
        break;
      case ParamInit::kZero:
        for (int64_t i = 0; i < n; ++i) t[i] = 0.0f;
        break;
      case ParamInit::kOne:
        for (int64_t i = 0; i < n; ++i) t[i] = 1.0f;
        break;
    }
  }
  params_from_host(host);
}

}  // namespace gpt2
