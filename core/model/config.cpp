#include "model/config.h"

#include <fmt/format.h>

#include <stdexcept>

#include "util/checked.h"
#include "util/enum_names.h"

namespace gpt2 {

void Gpt2Config::validate(bool vocab_from_tokenizer) const {
  auto positive = [](const char* key, int v) {
    if (v <= 0) throw std::invalid_argument(fmt::format("model.{}: must be positive, got {}", key, v));
  };
  if (vocab_from_tokenizer && V < 0) {
    throw std::invalid_argument(fmt::format("model.vocab_size: must be >= 0 (0 = from the tokenizer), got {}", V));
  }
  if (!vocab_from_tokenizer || V != 0) positive("vocab_size", V);
  positive("block_size", T);
  // Every arena and the position table are sized by it (a RoPE model's zero table too): a bound that names
  // the key before gigabytes are allocated for a tiny model.
  if (T > kMaxBlockSize) {
    throw std::invalid_argument(fmt::format("model.block_size: at most {} positions, got {}", kMaxBlockSize, T));
  }
  positive("n_layer", L);
  positive("n_head", NH);
  positive("n_embd", C);
  const auto at_most = [](const char* key, int v, int max) {
    if (v > max) throw std::invalid_argument(fmt::format("model.{}: at most {}, got {}", key, max, v));
  };
  at_most("vocab_size", V, kMaxVocab);
  at_most("n_layer", L, kMaxLayers);
  at_most("n_embd", C, kMaxEmbd);
  at_most("mlp_hidden", mlp_hidden, kMaxMlpHidden);
  if (C % NH != 0) {
    throw std::invalid_argument(fmt::format("model.n_embd: {} is not divisible by model.n_head {}", C, NH));
  }
  if (n_kv_head < 0 || (n_kv_head > 0 && NH % n_kv_head != 0)) {
    throw std::invalid_argument(fmt::format(
        "model.n_kv_head: {} must divide model.n_head {} (each key/value head serves a group of query heads; 0 = "
        "n_head)", n_kv_head, NH));
  }
  if (vocab_valid < 0 || (V > 0 && vocab_valid > V)) {
    throw std::invalid_argument(fmt::format(
        "model.vocab_valid: {} must be in [0, vocab_size {}] (the ids the logits cover; 0 = all of them)", vocab_valid,
        V));
  }
  if (mlp_hidden < 0) throw std::invalid_argument(fmt::format("model.mlp_hidden: must be >= 0, got {}", mlp_hidden));
  if (rope()) {
    if (head_size() % 2 != 0 || head_size() > 512) {
      throw std::invalid_argument(fmt::format(
          "model.position: rope turns pairs of channels, so the head size n_embd / n_head must be even and at "
          "most 512, got {}", head_size()));
    }
    if (!(rope_theta > 1.0f)) {
      throw std::invalid_argument(fmt::format("model.rope_theta: must be > 1, got {}", rope_theta));
    }
  }
  if (swiglu() && activation_kind() != ActivationKind::kSilu) {
    throw std::invalid_argument(fmt::format(
        "model.activation: {} with model.mlp swiglu; SwiGLU gates with silu (set model.activation to silu or auto)",
        to_string(activation_kind())));
  }
  // The parameters in all (every bias counted: a bound, not the exact count), checked as they are summed.
  const auto u = [](int v) { return static_cast<uint64_t>(v); };
  const std::string_view what = "model: the parameter count";
  const uint64_t c = u(C), rows = u(V) * (tie_embeddings ? 1 : 2) + (rope() ? 0 : u(T));
  const uint64_t per_layer = checked_product({u(qkv_width()) + u(C) + u(fc_width()) + u(mlp_width()) + 1, c}, what) +
                             u(qkv_width()) + u(fc_width()) + 6 * c;
  const uint64_t total = checked_add(checked_product({rows, c}, what), checked_product({per_layer, u(L)}, what), what);
  if (total + 2 * c > kMaxParams) {
    throw std::invalid_argument(fmt::format(
        "model: about {} parameters, above the {} (2^40) this engine plans for; make model.n_layer, model.n_embd or "
        "model.vocab_size smaller", total + 2 * c, kMaxParams));
  }
}

template <> struct EnumNames<Arch> { static constexpr const char* names[] = {"gpt2", "llama"}; static constexpr const char* key = "model.arch"; };
template <> struct EnumNames<NormKind> { static constexpr const char* names[] = {"auto", "layernorm", "rmsnorm"}; static constexpr const char* key = "model.norm"; };
template <> struct EnumNames<NormPosition> { static constexpr const char* names[] = {"auto", "pre", "post"}; static constexpr const char* key = "model.norm_position"; };
template <> struct EnumNames<PositionKind> { static constexpr const char* names[] = {"auto", "learned", "rope"}; static constexpr const char* key = "model.position"; };
template <> struct EnumNames<ActivationKind> { static constexpr const char* names[] = {"auto", "gelu", "relu", "silu"}; static constexpr const char* key = "model.activation"; };
template <> struct EnumNames<MlpKind> { static constexpr const char* names[] = {"auto", "standard", "swiglu"}; static constexpr const char* key = "model.mlp"; };
template <> struct EnumNames<BiasKind> { static constexpr const char* names[] = {"proj", "all", "none"}; static constexpr const char* key = "model.bias"; };

std::string to_string(Arch v) { return enum_name(v); }
std::string to_string(NormKind v) { return enum_name(v); }
std::string to_string(NormPosition v) { return enum_name(v); }
std::string to_string(PositionKind v) { return enum_name(v); }
std::string to_string(ActivationKind v) { return enum_name(v); }
std::string to_string(MlpKind v) { return enum_name(v); }
std::string to_string(BiasKind v) { return enum_name(v); }
void from_string(const std::string& name, Arch& v) { parse_enum(name, v); }
void from_string(const std::string& name, NormKind& v) { parse_enum(name, v); }
void from_string(const std::string& name, NormPosition& v) { parse_enum(name, v); }
void from_string(const std::string& name, PositionKind& v) { parse_enum(name, v); }
void from_string(const std::string& name, ActivationKind& v) { parse_enum(name, v); }
void from_string(const std::string& name, MlpKind& v) { parse_enum(name, v); }
void from_string(const std::string& name, BiasKind& v) { parse_enum(name, v); }

NormKind Gpt2Config::norm_kind() const {
  if (norm != NormKind::kAuto) return norm;
  return arch == Arch::kLlama ? NormKind::kRmsNorm : NormKind::kLayerNorm;
}
NormPosition Gpt2Config::norm_pos() const {
  return norm_position != NormPosition::kAuto ? norm_position : NormPosition::kPre;
}
PositionKind Gpt2Config::position_kind() const {
  if (position != PositionKind::kAuto) return position;
  return arch == Arch::kLlama ? PositionKind::kRope : PositionKind::kLearned;
}
MlpKind Gpt2Config::mlp_kind() const {
  if (mlp != MlpKind::kAuto) return mlp;
  return arch == Arch::kLlama ? MlpKind::kSwiglu : MlpKind::kStandard;
}
ActivationKind Gpt2Config::activation_kind() const {
  if (activation != ActivationKind::kAuto) return activation;
  return arch == Arch::kLlama || mlp_kind() == MlpKind::kSwiglu ? ActivationKind::kSilu : ActivationKind::kGelu;
}
int Gpt2Config::mlp_width() const {
  if (mlp_hidden > 0) return mlp_hidden;
  return swiglu() ? (C + 5) / 6 * 16 : 4 * C;
}
bool Gpt2Config::is_gpt2() const {
  return norm_kind() == NormKind::kLayerNorm && !post_norm() && !rope() &&
         activation_kind() == ActivationKind::kGelu && !swiglu() && mlp_width() == 4 * C && kv_heads() == NH &&
         !tie_embeddings && bias == BiasKind::kProj;
}

const std::vector<std::string>& Gpt2Config::variant_keys() {
  static const std::vector<std::string> keys = {"arch", "norm", "norm_position", "position", "rope_theta",
                                                "activation", "mlp", "mlp_hidden", "n_kv_head", "tie_embeddings",
                                                "bias", "vocab_valid"};
  return keys;
}

Gpt2Config Gpt2Config::resolved() const {
  Gpt2Config r = *this;
  r.norm = norm_kind();
  r.norm_position = norm_pos();
  r.position = position_kind();
  r.activation = activation_kind();
  r.mlp = mlp_kind();
  r.mlp_hidden = mlp_width();
  r.n_kv_head = kv_heads();
  return r;
}

bool Gpt2Config::operator==(const Gpt2Config& o) const {
  const Gpt2Config a = resolved(), b = o.resolved();
  return a.V == b.V && a.T == b.T && a.L == b.L && a.NH == b.NH && a.C == b.C && a.init == b.init &&
         a.arch == b.arch && a.norm == b.norm && a.norm_position == b.norm_position && a.position == b.position &&
         a.rope_theta == b.rope_theta && a.activation == b.activation && a.mlp == b.mlp &&
         a.mlp_hidden == b.mlp_hidden && a.n_kv_head == b.n_kv_head && a.tie_embeddings == b.tie_embeddings &&
         a.bias == b.bias && a.valid_vocab() == b.valid_vocab();
}

InitKind parse_init_kind(const std::string& name) {
  if (name == "philox") return InitKind::kPhilox;
  if (name == "original") return InitKind::kOriginal;
  if (name == "gpt2") return InitKind::kGpt2;
  throw std::invalid_argument(
      fmt::format("model.init: unknown initialisation '{}' (expected philox, gpt2 or original)", name));
}

std::string to_string(InitKind kind) {
  return kind == InitKind::kOriginal ? "original" : kind == InitKind::kGpt2 ? "gpt2" : "philox";
}

std::string Gpt2Config::describe() const {
  std::string out = fmt::format("V={} T={} L={} NH={} C={} (head size {})", V, T, L, NH, C, head_size());
  if (!is_gpt2() || arch != Arch::kGpt2) {
    out += fmt::format(" {}: {} {}-norm, {} positions, {} {} MLP of {}, {} kv heads{}", to_string(arch),
                       to_string(norm_kind()), to_string(norm_pos()), to_string(position_kind()),
                       to_string(activation_kind()), to_string(mlp_kind()), mlp_width(), kv_heads(),
                       tie_embeddings ? ", tied embeddings" : "");
    if (bias != BiasKind::kProj) out += fmt::format(", {} linear biases", to_string(bias));
  }
  if (masks_vocab()) out += fmt::format(", {} ids (padding masked)", valid_vocab());
  return out;
}

Gpt2Config preset(const std::string& name) {
  if (name == "original") return Gpt2Config{172, 256, 6, 6, 384};
  if (name == "small") return Gpt2Config{64, 32, 2, 4, 64};
  if (name == "gpt2-124m") {
    Gpt2Config g{50304, 1024, 12, 12, 768};
    g.bias = BiasKind::kAll;
    g.tie_embeddings = true;
    g.vocab_valid = 50257;
    return g;
  }
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument(fmt::format("unknown model preset '{}' (known: {})", name, known));
}

std::vector<std::string> preset_names() { return {"original", "small", "gpt2-124m"}; }

Gpt2Config resolve_vocab(Gpt2Config m, int tokenizer_vocab) {
  if (m.V == 0) m.V = tokenizer_vocab;
  if (tokenizer_vocab > m.V) {
    throw std::invalid_argument(fmt::format(
        "model.vocab_size: the tokenizer's vocabulary has {} tokens, more than vocab_size {}", tokenizer_vocab, m.V));
  }
  if (tokenizer_vocab > m.valid_vocab()) {
    throw std::invalid_argument(fmt::format(
        "model.vocab_valid: the tokenizer's vocabulary has {} tokens, but the logits cover {} (the rest is masked "
        "padding)", tokenizer_vocab, m.valid_vocab()));
  }
  m = m.resolved();
  m.validate();
  return m;
}

}  // namespace gpt2
