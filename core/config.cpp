#include "config.h"

#include <fmt/format.h>

#include <stdexcept>

namespace gpt2 {

void Gpt2Config::validate() const {
  auto positive = [](const char* key, int v) {
    if (v <= 0) throw std::invalid_argument(fmt::format("model.{} must be positive, got {}", key, v));
  };
  positive("vocab_size", V);
  positive("block_size", T);
  positive("n_layer", L);
  positive("n_head", NH);
  positive("n_embd", C);
  if (C % NH != 0) {
    throw std::invalid_argument(
        fmt::format("model.n_embd ({}) must be divisible by model.n_head ({})", C, NH));
  }
}

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

}  // namespace gpt2
