#include "train/formats/llmc_hf.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>

#include "model/params.h"
#include "train/data/corpus.h"
#include "train/formats/checkpoint.h"
#include "util/checked.h"
#include "util/files.h"
#include "util/json.h"
#include "util/text.h"

namespace gpt2 {

namespace {

// A stored value's type: safetensors' F32, F16 and BF16, llm.c's fp32 and bf16.
enum class StoredType { kF32, kF16, kBf16 };

// One stored 16-bit value as fp32, exactly (every F16 and BF16 value is an fp32 value).
float widen(uint16_t h, StoredType t) {
  if (t == StoredType::kBf16) return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));  // inf, nan
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
  const float tiny = static_cast<float>(man) * 0x1p-24f;  // subnormal (or zero): man x 2^-24, exact
  return sign ? -tiny : tiny;
}

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
  if (h[1] != 3 && h[1] != 5) fail(fmt::format("version {}, not 3 (fp32) or 5 (bf16)", h[1]));
  const size_t width = h[1] == 5 ? 2 : 4;  // bytes per value
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
    want = checked_add(want, checked_mul(n, width, "llm.c header: tensor " + name), "llm.c header: file size");
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
    if (width == 4) {
      file.read(to.data(), n * sizeof(float));
    } else {  // bf16: the high half of an fp32, so widening is exact
      std::vector<uint16_t> raw(n);
      file.read(raw.data(), n * sizeof(uint16_t));
      for (size_t i = 0; i < n; ++i) to[i] = widen(raw[i], StoredType::kBf16);
    }
    if (const std::string bad = non_finite(to); !bad.empty()) fail(fmt::format("tensor {}: {}", name, bad));
  });
  return m;
}

namespace {
// GPT2Model's tensors of `c` (names without "transformer."), each with ours,
// its stored shape and whether it is a Conv1D weight ((in, out): ours transposed).
struct HfTensor {
  std::string hf, ours;
  std::vector<int64_t> shape;
  bool conv1d = false;
};
std::vector<HfTensor> hf_gpt2_tensors(const Gpt2Config& c) {
  const int64_t V = c.valid_vocab(), T = c.T, C = c.C, H = 4 * c.C;
  std::vector<HfTensor> out = {{"wte.weight", "wte", {V, C}}, {"wpe.weight", "wpe", {T, C}}};
  for (int l = 0; l < c.L; ++l) {
    const std::string hf = fmt::format("h.{}.", l), ours = fmt::format("h.{}.", l);
    for (HfTensor t : std::vector<HfTensor>{{"ln_1.weight", "ln1_w", {C}},
                                           {"ln_1.bias", "ln1_b", {C}},
                                           {"attn.c_attn.weight", "qkv_w", {C, 3 * C}, true},
                                           {"attn.c_attn.bias", "qkv_b", {3 * C}},
                                           {"attn.c_proj.weight", "attn_proj_w", {C, C}, true},
                                           {"attn.c_proj.bias", "attn_proj_b", {C}},
                                           {"ln_2.weight", "ln2_w", {C}},
                                           {"ln_2.bias", "ln2_b", {C}},
                                           {"mlp.c_fc.weight", "fc_w", {C, H}, true},
                                           {"mlp.c_fc.bias", "fc_b", {H}},
                                           {"mlp.c_proj.weight", "fc_proj_w", {H, C}, true},
                                           {"mlp.c_proj.bias", "fc_proj_b", {C}}}) {
      out.push_back({hf + t.hf, ours + t.ours, t.shape, t.conv1d});
    }
  }
  out.push_back({"ln_f.weight", "lnf_w", {C}});
  out.push_back({"ln_f.bias", "lnf_b", {C}});
  return out;
}
}  // namespace

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
  const int64_t V = c.valid_vocab(), C = c.C;
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
  for (const HfTensor& t : hf_gpt2_tensors(c)) add("transformer." + t.hf, t.ours, t.shape, t.conv1d);  // wte: the real rows
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

namespace {

constexpr uint64_t kMaxSafetensorsHeader = uint64_t{100} << 20;  // the format's own bound (100 MB)
constexpr uint64_t kMaxConfigJson = uint64_t{1} << 20;

// One tensor of a safetensors file, as its header says.
struct StoredTensor {
  std::string file;  // the .safetensors path
  StoredType dtype = StoredType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // absolute byte offsets in `file`
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string t = "(";
  for (size_t i = 0; i < shape.size(); ++i) t += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return t + ")";
}

// The tensors tile the data [data_begin, end) exactly, as the format
// requires: no overlap (two names for the same bytes), no hole, nothing after
// the last. Else `fail` (which throws) names the first that does not.
template <typename Fail>
void check_tiling(const std::map<std::string, StoredTensor>& tensors, uint64_t data_begin, uint64_t end, Fail&& fail) {
  std::vector<std::pair<std::pair<uint64_t, uint64_t>, std::string>> spans;
  for (const auto& [name, st] : tensors) spans.push_back({{st.begin, st.end}, name});
  std::sort(spans.begin(), spans.end());
  uint64_t at = data_begin;
  for (const auto& [span, name] : spans) {
    if (span.first != at) {
      fail(fmt::format(
          "tensor '{}' starts at data byte {} where {} (the data has {} there; the format's tensors "
          "tile the data, with no hole or overlap)",
          excerpt(name), span.first - data_begin, at - data_begin, span.first < at ? "an overlap" : "a hole"));
    }
    at = span.second;
  }
  if (at != end)
    fail(fmt::format("{} data bytes after the last tensor (the format's tensors tile the data)", end - at));
}

// The first top-level key of the JSON object `text` that appears twice ("" for
// none): the parser keeps one of the two values, so the repeat is found while
// parsing.
std::string repeated_top_key(const std::string& text) {
  std::set<std::string> seen;
  std::string twice;
  const Json::parser_callback_t note = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key && twice.empty() &&
        !seen.insert(parsed.get<std::string>()).second) {
      twice = parsed.get<std::string>();
    }
    return true;
  };
  (void)Json::parse(text, note, false);
  return twice;
}

// The header of one .safetensors file: every tensor's dtype, shape and bytes,
// checked against the file (sizes with checked arithmetic) before any is read.
std::map<std::string, StoredTensor> read_safetensors_header(const std::filesystem::path& path) {
  InputFile file(path, kMaxCheckpointBytes, "--hf", "a safetensors file");
  const auto fail = [&](const std::string& why) { throw std::invalid_argument(file.error(why)); };
  if (file.size() < 8) fail(fmt::format("{} bytes, shorter than the 8-byte header length", file.size()));
  uint8_t len_bytes[8];
  file.read(len_bytes, 8);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
  if (len > kMaxSafetensorsHeader) fail(fmt::format("a header of {} bytes, over the format's 100 MB", len));
  if (len > file.size() - 8) fail(fmt::format("a header of {} bytes in a file of {}: truncated", len, file.size()));
  std::string text(static_cast<size_t>(len), '\0');
  file.read(text.data(), text.size());
  Json header;
  try {
    header = parse_json(text, "its header");
  } catch (const std::runtime_error& e) {
    fail(e.what());
  }
  if (!header.is_object()) fail("its header is not a JSON object");
  if (const std::string twice = repeated_top_key(text); !twice.empty()) {
    fail(fmt::format("tensor '{}' is named twice (the format's names are unique)", excerpt(twice)));
  }
  const uint64_t data_begin = 8 + len, data_bytes = file.size() - data_begin;
  std::map<std::string, StoredTensor> out;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    const auto bad = [&](const std::string& why) { fail(fmt::format("tensor '{}': {}", excerpt(name), why)); };
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets")) {
      bad("not an object with dtype, shape and data_offsets");
    }
    StoredTensor st;
    st.file = path.string();
    const Json& dt = t["dtype"];
    const std::string dtype = dt.is_string() ? dt.get<std::string>() : dt.dump();
    if (dtype == "F32") {
      st.dtype = StoredType::kF32;
    } else if (dtype == "F16") {
      st.dtype = StoredType::kF16;
    } else if (dtype == "BF16") {
      st.dtype = StoredType::kBf16;
    } else {
      bad(fmt::format("dtype {} (expected F32, F16 or BF16)", excerpt(dtype)));
    }
    uint64_t count = 1;
    if (!t["shape"].is_array() || t["shape"].size() > 8) bad("shape is not an array of at most 8 sizes");
    for (const Json& d : t["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40))
        bad(fmt::format("shape {}", excerpt(t["shape"].dump())));
      st.shape.push_back(d.get<int64_t>());
      count = checked_mul(count, d.get<uint64_t>(), "safetensors: tensor " + name);
    }
    const Json& off = t["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      bad("data_offsets is not two byte offsets");
    }
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    const uint64_t want = checked_mul(count, uint64_t{st.dtype == StoredType::kF32 ? 4u : 2u}, "safetensors: tensor " + name);
    if (e < b || e > data_bytes) bad(fmt::format("data_offsets [{}, {}] outside the file's {} data bytes", b, e, data_bytes));
    if (e - b != want) {
      bad(fmt::format("{} bytes for a {} {} tensor of {}", e - b, dtype, excerpt(shape_text(st.shape)), want));
    }
    st.begin = data_begin + b;
    st.end = data_begin + e;
    out.emplace(name, std::move(st));
  }
  check_tiling(out, data_begin, file.size(), fail);
  return out;
}

// The floats of one stored tensor, widened to fp32 and checked finite.
std::vector<float> read_stored(const StoredTensor& t, const std::string& name) {
  InputFile file(t.file, kMaxCheckpointBytes, "--hf", "a safetensors file");
  file.seek(t.begin);
  const size_t bytes = static_cast<size_t>(t.end - t.begin);
  std::vector<float> out(t.dtype == StoredType::kF32 ? bytes / 4 : bytes / 2);
  if (t.dtype == StoredType::kF32) {
    file.read(out.data(), bytes);
  } else {
    std::vector<uint16_t> raw(out.size());
    file.read(raw.data(), bytes);
    for (size_t i = 0; i < raw.size(); ++i) out[i] = widen(raw[i], t.dtype);
  }
  if (const std::string bad = non_finite(out); !bad.empty()) {
    throw std::invalid_argument(file.error(fmt::format("tensor '{}': {}", name, bad)));
  }
  return out;
}

// GPT2LMHeadModel's config.json as our configuration; anything else refused naming the key.
Gpt2Config hf_config_of(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "config.json";
  if (!std::filesystem::exists(path)) {
    throw std::invalid_argument(fmt::format("--hf: '{}' has no config.json (a Hugging Face model folder holds "
                                            "config.json and model.safetensors)", dir.string()));
  }
  const std::string text = read_input_file(path, kMaxConfigJson, "--hf", "a Hugging Face config.json");
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument(fmt::format("--hf: {}: {}", path.string(), why));
  };
  Json j;
  try {
    j = parse_json(text, "config.json");
  } catch (const std::runtime_error& e) {
    fail(e.what());
  }
  if (!j.is_object()) fail("not a JSON object");
  if (j.contains("model_type") && j["model_type"] != Json("gpt2")) {
    fail(fmt::format("model_type {}: only GPT-2 (gpt2) is read", j["model_type"].dump()));
  }
  const auto size = [&](const char* key, const char* alt) -> int {
    const Json* v = j.contains(key) ? &j[key] : (alt && j.contains(alt) ? &j[alt] : nullptr);
    if (v == nullptr) fail(fmt::format("{} is missing", key));
    if (!v->is_number_integer() || v->get<int64_t>() <= 0 || v->get<int64_t>() > (int64_t{1} << 30)) {
      fail(fmt::format("{} {}: not a positive size", key, v->dump()));
    }
    return static_cast<int>(v->get<int64_t>());
  };
  Gpt2Config c{size("vocab_size", nullptr), size("n_positions", "n_ctx"), size("n_layer", nullptr),
               size("n_head", nullptr), size("n_embd", nullptr)};
  c.bias = BiasKind::kAll;
  const auto flag = [&](const char* key, bool def) {
    if (!j.contains(key)) return def;
    if (!j[key].is_boolean()) fail(fmt::format("{} {}: not true or false", key, j[key].dump()));
    return j[key].get<bool>();
  };
  c.tie_embeddings = flag("tie_word_embeddings", true);
  const Json act_j = j.contains("activation_function") ? j["activation_function"] : Json("gelu_new");
  const std::string act = act_j.is_string() ? act_j.get<std::string>() : act_j.dump();
  if (act != "gelu_new" && act != "gelu_pytorch_tanh") {
    fail(fmt::format("activation_function {}: this engine's GELU is the tanh form (gelu_new)", act));
  }
  if (j.contains("n_inner") && !j["n_inner"].is_null() && j["n_inner"] != Json(4 * c.C)) {
    fail(fmt::format("n_inner {}: this engine's GPT-2 MLP is 4 x n_embd = {}", j["n_inner"].dump(), 4 * c.C));
  }
  if (j.contains("layer_norm_epsilon") &&
      (!j["layer_norm_epsilon"].is_number() || std::abs(j["layer_norm_epsilon"].get<double>() - 1e-5) > 1e-12)) {
    fail(fmt::format("layer_norm_epsilon {}: this engine's LayerNorm uses 1e-5", j["layer_norm_epsilon"].dump()));
  }
  if (!flag("scale_attn_weights", true) || flag("scale_attn_by_inverse_layer_idx", false)) {
    fail("scale_attn_weights false or scale_attn_by_inverse_layer_idx true: attention scaled otherwise than by "
         "1/sqrt(head size)");
  }
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
  return c.resolved();
}

// Every tensor of the folder's safetensors: model.safetensors, or the files
// model.safetensors.index.json's weight_map names (plain names in `dir`).
std::map<std::string, StoredTensor> hf_tensors(const std::filesystem::path& dir) {
  const std::filesystem::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  std::set<std::string> files;
  if (std::filesystem::exists(index)) {
    const std::string text = read_input_file(index, uint64_t{64} << 20, "--hf", "a safetensors index");
    Json j;
    try {
      j = parse_json(text, index.string());
    } catch (const std::runtime_error& e) {
      throw std::invalid_argument(fmt::format("--hf: {}", e.what()));
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      throw std::invalid_argument(fmt::format("--hf: {}: no weight_map object", index.string()));
    }
    for (const auto& [name, f] : j["weight_map"].items()) {
      const std::string file = f.is_string() ? f.get<std::string>() : "";
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
        throw std::invalid_argument(fmt::format("--hf: {}: weight_map's '{}' names {}, not a file in the folder",
                                                index.string(), name, f.dump()));
      }
      files.insert(file);
    }
  } else if (std::filesystem::exists(single)) {
    files.insert("model.safetensors");
  } else {
    throw std::invalid_argument(fmt::format("--hf: '{}' holds neither model.safetensors nor "
                                            "model.safetensors.index.json", dir.string()));
  }
  std::map<std::string, StoredTensor> all;
  for (const std::string& f : files) {
    for (auto& [name, t] : read_safetensors_header(dir / f)) {
      if (!all.emplace(name, t).second) {
        throw std::invalid_argument(fmt::format("--hf: tensor '{}' is in two files ({} and {})", name, all[name].file, t.file));
      }
    }
  }
  return all;
}

}  // namespace

HfModel read_hf_gpt2(const std::string& dir_name) {
  const std::filesystem::path dir(dir_name);
  if (!std::filesystem::is_directory(dir)) {
    throw std::invalid_argument(fmt::format("--hf: '{}' is not a folder (a Hugging Face model folder holds "
                                            "config.json and model.safetensors)", dir_name));
  }
  HfModel m;
  m.config = hf_config_of(dir);
  const Gpt2Config& c = m.config;
  std::map<std::string, StoredTensor> stored = hf_tensors(dir);
  // Both name styles: GPT2LMHeadModel's ("transformer.h.0...") and GPT2Model's ("h.0..."); the head is "lm_head.weight".
  std::map<std::string, std::pair<std::string, StoredTensor>> by_name;  // name without the prefix -> (stored name, tensor)
  for (auto& [name, t] : stored) {
    const std::string bare = name.starts_with("transformer.") ? name.substr(12) : name;
    if (by_name.contains(bare)) {
      throw std::invalid_argument(fmt::format("--hf: '{}' and '{}' are the same tensor", by_name[bare].first, name));
    }
    by_name.emplace(bare, std::pair{name, t});
  }
  const int64_t V = c.V, C = c.C;
  m.params.assign(param_count(c), 0.0f);
  const Slots slots(c);
  std::set<std::string> used;
  const auto take = [&](const std::string& bare, const std::string& ours, std::vector<int64_t> shape, bool conv1d) {
    const auto it = by_name.find(bare);
    if (it == by_name.end()) throw std::invalid_argument(fmt::format("--hf: '{}': tensor {} is missing", dir_name, bare));
    const auto& [stored_name, t] = it->second;
    if (t.shape != shape) {
      throw std::invalid_argument(fmt::format("--hf: tensor '{}' is {}, but config.json's model has {}", stored_name,
                                              shape_text(t.shape), shape_text(shape)));
    }
    used.insert(bare);
    const std::vector<float> x = read_stored(t, stored_name);
    const std::span<float> to = slots.get(std::span<float>(m.params), ours);
    if (!conv1d) {
      std::copy(x.begin(), x.end(), to.begin());
      return;
    }
    const auto in = static_cast<size_t>(shape[0]), out = static_cast<size_t>(shape[1]);  // Conv1D: (in, out)
    for (size_t o = 0; o < out; ++o) {
      for (size_t i = 0; i < in; ++i) to[o * in + i] = x[i * out + o];
    }
  };
  for (const HfTensor& t : hf_gpt2_tensors(c)) take(t.hf, t.ours, t.shape, t.conv1d);
  for (int l = 0; l < c.L; ++l) {  // older files keep the attention's mask buffers; they are not weights
    for (const char* buffer : {"attn.bias", "attn.masked_bias"}) {
      if (by_name.contains(fmt::format("h.{}.{}", l, buffer))) used.insert(fmt::format("h.{}.{}", l, buffer));
    }
  }
  if (!c.tie_embeddings) {
    take("lm_head.weight", "lm_head", {V, C}, false);
  } else if (const auto it = by_name.find("lm_head.weight"); it != by_name.end()) {
    // Tied, but stored (as some writers do): it must be wte's values, or the file is another model.
    if (it->second.second.shape != std::vector<int64_t>{V, C} ||
        read_stored(it->second.second, "lm_head.weight") != std::vector<float>(slots.get(std::span<const float>(m.params), "wte").begin(),
                                                                             slots.get(std::span<const float>(m.params), "wte").end())) {
      throw std::invalid_argument(fmt::format("--hf: tensor 'lm_head.weight' differs from wte, but config.json "
                                              "ties them (tie_word_embeddings true)"));
    }
    used.insert("lm_head.weight");
  }
  for (const auto& [bare, named] : by_name) {
    if (!used.contains(bare)) {
      throw std::invalid_argument(fmt::format("--hf: tensor '{}' is not part of GPT2LMHeadModel's weights", named.first));
    }
  }
  return m;
}

std::optional<std::pair<std::string, std::string>> hf_tokenizer_files(const std::string& dir) {
  const std::filesystem::path d(dir);
  if (!std::filesystem::exists(d / "vocab.json") || !std::filesystem::exists(d / "merges.txt")) return std::nullopt;
  return std::pair{(d / "vocab.json").string(), (d / "merges.txt").string()};
}

}  // namespace gpt2
