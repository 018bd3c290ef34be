#include "model/config.h"

#include <fmt/format.h>

#include <stdexcept>

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
  positive("n_layer", L);
  positive("n_head", NH);
  positive("n_embd", C);
  if (C % NH != 0) {
    throw std::invalid_argument(fmt::format("model.n_embd: {} is not divisible by model.n_head {}", C, NH));
  }
}

InitKind parse_init_kind(const std::string& name) {
  if (name == "philox") return InitKind::kPhilox;
  if (name == "original") return InitKind::kOriginal;
  throw std::invalid_argument(fmt::format("model.init: unknown initialisation '{}' (expected philox or original)", name));
}

std::string to_string(InitKind kind) { return kind == InitKind::kOriginal ? "original" : "philox"; }

std::string Gpt2Config::describe() const {
  return fmt::format("V={} T={} L={} NH={} C={} (head size {})", V, T, L, NH, C, head_size());
}

Gpt2Config preset(const std::string& name) {
  if (name == "original") return Gpt2Config{172, 256, 6, 6, 384};
  if (name == "small") return Gpt2Config{64, 32, 2, 4, 64};
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument(fmt::format("unknown model preset '{}' (known: {})", name, known));
}

std::vector<std::string> preset_names() { return {"original", "small"}; }

Gpt2Config resolve_vocab(Gpt2Config m, int tokenizer_vocab) {
  if (m.V == 0) m.V = tokenizer_vocab;
  if (tokenizer_vocab > m.V) {
    throw std::invalid_argument(fmt::format(
        "model.vocab_size: the tokenizer's vocabulary has {} tokens, more than vocab_size {}", tokenizer_vocab, m.V));
  }
  m.validate();
  return m;
}

}  // namespace gpt2
