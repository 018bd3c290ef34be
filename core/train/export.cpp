#include "train/export.h"

#include <fmt/format.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "model/params.h"
#include "train/checkpoint.h"
#include "train/corpus.h"
#include "util/checked.h"
#include "util/files.h"
#include "util/json.h"

namespace gpt2 {

namespace {

// The block both formats hold, as one phrase naming the first key that is
// not it ("" when it is).
std::string block_difference(const Gpt2Config& c) {
  if (c.norm_kind() != NormKind::kLayerNorm) return fmt::format("model.norm {}: it has LayerNorm", to_string(c.norm_kind()));
  if (c.post_norm()) return "model.norm_position post: it has pre-norm blocks";
  if (c.rope()) return "model.position rope: it has learned positions";
  if (c.swiglu()) return "model.mlp swiglu: it has the standard MLP";
  if (c.activation_kind() != ActivationKind::kGelu) {
    return fmt::format("model.activation {}: it has GELU", to_string(c.activation_kind()));
  }
  if (c.mlp_width() != 4 * c.C) return fmt::format("model.mlp_hidden {}: it has 4 x n_embd = {}", c.mlp_width(), 4 * c.C);
  if (c.kv_heads() != c.NH) return fmt::format("model.n_kv_head {}: it has {} key/value heads", c.kv_heads(), c.NH);
  return "";
}

// Name -> (offset, element count) of every tensor of `cfg`'s layout.
struct Slots {
  explicit Slots(const Gpt2Config& cfg) {
    ParamTensors p;
    for (const ParamInfo& info : layout(cfg, p)) at.emplace(info.name, std::pair{info.offset, info.count()});
  }
  // The tensor's floats in `params`, or an empty span (a bias the model has not).
  std::span<const float> get(std::span<const float> params, const std::string& name) const {
    const auto it = at.find(name);
    return it == at.end() ? std::span<const float>() : params.subspan(it->second.first, it->second.second);
  }
  std::span<float> get(std::span<float> params, const std::string& name) const {
    const auto it = at.find(name);
    return it == at.end() ? std::span<float>() : params.subspan(it->second.first, it->second.second);
  }
  std::map<std::string, std::pair<size_t, size_t>> at;
};

void put_floats(std::string& out, std::span<const float> x, size_t count) {
  // A missing tensor (a bias the model has not) is `count` zeros.
  const size_t at = out.size();
  out.resize(at + count * sizeof(float), '\0');
  if (!x.empty()) std::memcpy(out.data() + at, x.data(), count * sizeof(float));
}

// llm.c's tensors in its order: (our name with {} for the layer, floats a layer or in all).
struct LlmcTensor {
  const char* name;
  bool per_layer;
};
constexpr std::array<LlmcTensor, 16> kLlmcOrder = {{{"wte", false},
                                                    {"wpe", false},
                                                    {"h.{}.ln1_w", true},
                                                    {"h.{}.ln1_b", true},
                                                    {"h.{}.qkv_w", true},
                                                    {"h.{}.qkv_b", true},
                                                    {"h.{}.attn_proj_w", true},
                                                    {"h.{}.attn_proj_b", true},
                                                    {"h.{}.ln2_w", true},
                                                    {"h.{}.ln2_b", true},
                                                    {"h.{}.fc_w", true},
                                                    {"h.{}.fc_b", true},
                                                    {"h.{}.fc_proj_w", true},
                                                    {"h.{}.fc_proj_b", true},
                                                    {"lnf_w", false},
                                                    {"lnf_b", false}}};

// Floats of one llm.c tensor (one layer's for the per-layer kinds).
size_t llmc_count(const Gpt2Config& c, const std::string& name) {
  const size_t V = static_cast<size_t>(c.V), T = static_cast<size_t>(c.T), C = static_cast<size_t>(c.C);
  if (name == "wte") return V * C;
  if (name == "wpe") return T * C;
  if (name.ends_with("qkv_w")) return 3 * C * C;
  if (name.ends_with("qkv_b")) return 3 * C;
  if (name.ends_with("attn_proj_w")) return C * C;
  if (name.ends_with("fc_w") || name.ends_with("fc_proj_w")) return 4 * C * C;
  if (name.ends_with("fc_b")) return 4 * C;
  return C;  // the norms' gains and biases, attn_proj_b, fc_proj_b
}

// Calls f(our name, floats) for every llm.c tensor in file order.
template <typename F>
void for_each_llmc(const Gpt2Config& c, F&& f) {
  for (const LlmcTensor& t : kLlmcOrder) {
    if (!t.per_layer) {
      f(std::string(t.name), llmc_count(c, t.name));
      continue;
    }
    for (int l = 0; l < c.L; ++l) {
      const std::string name = fmt::format(fmt::runtime(t.name), l);
      f(name, llmc_count(c, name));
    }
  }
}

}  // namespace

std::string llmc_difference(const Gpt2Config& cfg) {
  const Gpt2Config c = cfg.resolved();
  if (!c.tie_embeddings) return "model.tie_embeddings false: llm.c ties the head to wte";
  return block_difference(c);
}

std::string hf_gpt2_difference(const Gpt2Config& cfg) { return block_difference(cfg.resolved()); }

void write_llmc_model(const std::string& path, const Gpt2Config& cfg, std::span<const float> params) {
  const Gpt2Config c = cfg.resolved();
  if (const std::string why = llmc_difference(c); !why.empty()) {
    throw std::invalid_argument(fmt::format("llm.c's model file cannot hold this model: {}", why));
  }
  if (params.size() != param_count(c)) {
    throw std::invalid_argument(fmt::format("export: {} parameters for a model of {}", params.size(), param_count(c)));
  }
  std::array<int32_t, 256> header{};
  header[0] = kLlmcModelMagic;
  header[1] = 3;
  header[2] = c.T;
  header[3] = c.valid_vocab();
  header[4] = c.L;
  header[5] = c.NH;
  header[6] = c.C;
  header[7] = c.V;
  std::string out(reinterpret_cast<const char*>(header.data()), sizeof(header));
  const Slots slots(c);
  for_each_llmc(c, [&](const std::string& name, size_t n) { put_floats(out, slots.get(params, name), n); });
  write_file_atomically(path, out);
}

LlmcModel read_llmc_model(const std::string& path) {
  // The header first, then its sizes checked (with checked arithmetic) against the file's before the body is read.
  InputFile file(path, kMaxCheckpointBytes, "--llmc", "an llm.c model file");
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument(fmt::format("llm.c model '{}': {}", path, why));
  };
  if (file.size() < 256 * sizeof(int32_t)) {
    fail(fmt::format("{} bytes, shorter than the 1024-byte header", file.size()));
  }
  std::array<int32_t, 256> h{};
  file.read(h.data(), sizeof(h));
  if (h[0] != kLlmcModelMagic) fail(fmt::format("magic {}, not {}: not an llm.c model file", h[0], kLlmcModelMagic));
  if (h[1] != 3) {
    fail(fmt::format("version {}, not 3 (fp32){}", h[1], h[1] == 5 ? ": version 5 is bf16, which import does not read" : ""));
  }
  const int T = h[2], V = h[3], L = h[4], NH = h[5], C = h[6], Vp = h[7];
  if (T <= 0 || V <= 0 || L <= 0 || NH <= 0 || C <= 0 || Vp < V || C % NH != 0) {
    fail(fmt::format("header sizes T {} V {} L {} NH {} C {} padded V {} do not make a model", T, V, L, NH, C, Vp));
  }
  LlmcModel m;
  m.config = Gpt2Config{Vp, T, L, NH, C};
  m.config.bias = BiasKind::kAll;
  m.config.tie_embeddings = true;
  m.config.vocab_valid = Vp > V ? V : 0;
  try {
    m.config.validate();  // bounds every size (model/config.h), so the layers below are few and their sizes small
  } catch (const std::invalid_argument& e) {
    fail(fmt::format("header sizes T {} V {} L {} NH {} C {} padded V {}: {}", T, V, L, NH, C, Vp, e.what()));
  }
  m.config = m.config.resolved();
  uint64_t want = 256 * sizeof(int32_t);
  for_each_llmc(m.config, [&](const std::string& name, size_t n) {
    want = checked_add(want, checked_mul(n, sizeof(float), "llm.c header: tensor " + name), "llm.c header: file size");
  });
  if (file.size() != want) {
    fail(fmt::format("{} bytes, but its header's model takes {}: {}", file.size(), want,
                     file.size() < want ? "truncated" : "trailing bytes"));
  }
  m.params.assign(param_count(m.config), 0.0f);
  const Slots slots(m.config);
  for_each_llmc(m.config, [&](const std::string& name, size_t n) {
    const std::span<float> to = slots.get(std::span<float>(m.params), name);
    if (to.size() != n) throw std::logic_error(fmt::format("import: {} holds {} floats, llm.c's {}", name, to.size(), n));
    file.read(to.data(), n * sizeof(float));
    if (const std::string bad = non_finite(to); !bad.empty()) fail(fmt::format("tensor {}: {}", name, bad));
  });
  return m;
}

namespace {
// GPT2LMHeadModel's config.json for `c` (resolved); `tok` gives the end-of-text id.
Json hf_config(const Gpt2Config& c, const Tokenizer& tok) {
  const int eot = tok.kind() == TokenizerKind::kGpt2 ? tok.eos_id() : -1;
  Json config = {{"architectures", {"GPT2LMHeadModel"}},
                 {"model_type", "gpt2"},
                 {"vocab_size", c.valid_vocab()},
                 {"n_positions", c.T},
                 {"n_ctx", c.T},
                 {"n_embd", c.C},
                 {"n_layer", c.L},
                 {"n_head", c.NH},
                 {"n_inner", nullptr},
                 {"activation_function", "gelu_new"},
                 {"layer_norm_epsilon", 1e-5},
                 {"resid_pdrop", 0.0},
                 {"embd_pdrop", 0.0},
                 {"attn_pdrop", 0.0},
                 {"tie_word_embeddings", c.tie_embeddings},
                 {"torch_dtype", "float32"}};
  if (eot >= 0) {
    config["bos_token_id"] = eot;
    config["eos_token_id"] = eot;
  }
  return config;
}
}  // namespace

void write_hf_gpt2(const std::string& dir, const Gpt2Config& cfg, std::span<const float> params, const Tokenizer& tok) {
  const Gpt2Config c = cfg.resolved();
  if (const std::string why = hf_gpt2_difference(c); !why.empty()) {
    throw std::invalid_argument(fmt::format("GPT2LMHeadModel cannot hold this model: {}", why));
  }
  if (params.size() != param_count(c)) {
    throw std::invalid_argument(fmt::format("export: {} parameters for a model of {}", params.size(), param_count(c)));
  }
  const Slots slots(c);
  const int64_t V = c.valid_vocab(), T = c.T, C = c.C, H = 4 * c.C;
  Json header = Json::object();
  std::string data;
  // A tensor as stored: our floats copied, or (a Conv1D weight) our (out, in) transposed to (in, out).
  auto add = [&](const std::string& hf, const std::string& ours, std::vector<int64_t> shape, bool transpose) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    const std::span<const float> x = slots.get(params, ours);
    const size_t begin = data.size();
    if (!transpose || x.empty()) {
      put_floats(data, x.empty() ? x : x.first(n), n);
    } else {
      const auto in = static_cast<size_t>(shape[0]), out = static_cast<size_t>(shape[1]);
      std::vector<float> t(n);
      for (size_t o = 0; o < out; ++o) {
        for (size_t i = 0; i < in; ++i) t[i * out + o] = x[o * in + i];
      }
      put_floats(data, t, n);
    }
    header[hf] = Json{{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {begin, data.size()}}};
  };
  add("transformer.wte.weight", "wte", {V, C}, false);  // the real rows only
  add("transformer.wpe.weight", "wpe", {T, C}, false);
  for (int l = 0; l < c.L; ++l) {
    const std::string hf = fmt::format("transformer.h.{}.", l), ours = fmt::format("h.{}.", l);
    add(hf + "ln_1.weight", ours + "ln1_w", {C}, false);
    add(hf + "ln_1.bias", ours + "ln1_b", {C}, false);
    add(hf + "attn.c_attn.weight", ours + "qkv_w", {C, 3 * C}, true);
    add(hf + "attn.c_attn.bias", ours + "qkv_b", {3 * C}, false);
    add(hf + "attn.c_proj.weight", ours + "attn_proj_w", {C, C}, true);
    add(hf + "attn.c_proj.bias", ours + "attn_proj_b", {C}, false);
    add(hf + "ln_2.weight", ours + "ln2_w", {C}, false);
    add(hf + "ln_2.bias", ours + "ln2_b", {C}, false);
    add(hf + "mlp.c_fc.weight", ours + "fc_w", {C, H}, true);
    add(hf + "mlp.c_fc.bias", ours + "fc_b", {H}, false);
    add(hf + "mlp.c_proj.weight", ours + "fc_proj_w", {H, C}, true);
    add(hf + "mlp.c_proj.bias", ours + "fc_proj_b", {C}, false);
  }
  add("transformer.ln_f.weight", "lnf_w", {C}, false);
  add("transformer.ln_f.bias", "lnf_b", {C}, false);
  if (!c.tie_embeddings) add("lm_head.weight", "lm_head", {V, C}, false);
  header["__metadata__"] = Json{{"format", "pt"}};
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');  // the data 8-byte aligned, as the format recommends
  std::string file(8, '\0');
  const uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  file += text;
  file += data;
  std::filesystem::create_directory(dir);
  write_file_atomically(std::filesystem::path(dir) / "model.safetensors", file);
  write_file_atomically(std::filesystem::path(dir) / "config.json", hf_config(c, tok).dump(2) + "\n");
}

std::string export_checkpoint(const std::string& ckpt, const std::string& format, const std::string& out,
                              bool overwrite) {
  if (ckpt.empty()) throw std::invalid_argument("--checkpoint: the checkpoint to export is required");
  if (out.empty()) throw std::invalid_argument("--out: where to write the export is required");
  if (format != "llmc" && format != "hf") {
    throw std::invalid_argument(fmt::format("--format: '{}' (expected llmc or hf)", format));
  }
  check_output(out, OutputRules{"--out", {ckpt}, overwrite, format == "hf"});
  const Checkpoint ck = load_given_checkpoint(ckpt);
  if (format == "llmc") {
    write_llmc_model(out, ck.config, ck.params);
    return fmt::format("wrote {} as llm.c's model file {} ({}, {} parameters)", ckpt, out, ck.config.describe(),
                       ck.params.size());
  }
  write_hf_gpt2(out, ck.config, ck.params, ck.tokenizer);
  return fmt::format("wrote {} as {}/model.safetensors and {}/config.json (GPT2LMHeadModel, {})", ckpt, out, out,
                     ck.config.describe());
}

std::string import_llmc(const std::string& file, const std::string& encoder_json, const std::string& vocab_bpe,
                        const std::string& out, bool overwrite) {
  if (file.empty()) throw std::invalid_argument("--llmc: the llm.c model file to import is required");
  if (out.empty()) throw std::invalid_argument("--out: the checkpoint to write is required");
  check_output(out, OutputRules{"--out", {file, encoder_json, vocab_bpe}, overwrite, false});  // before any reading
  const Tokenizer tok = Tokenizer::gpt2(load_bpe_tokenizer(encoder_json, vocab_bpe));
  const LlmcModel m = read_llmc_model(file);
  if (tok.size() > m.config.valid_vocab()) {
    throw std::invalid_argument(fmt::format("llm.c model '{}': its {} ids cannot hold the tokenizer's {} tokens", file,
                                            m.config.valid_vocab(), tok.size()));
  }
  save_checkpoint(out, m.config, m.params, tok, nullptr, {{"import.llmc", file}});
  return fmt::format("imported {} ({}, {} parameters) into {}", file, m.config.describe(), m.params.size(), out);
}

}  // namespace gpt2
