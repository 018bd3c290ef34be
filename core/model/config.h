// Gpt2Config: the model's sizes, and the named presets.
// Letters used for sizes throughout the code base:
//   V vocabulary, T sequence length (block size), L layers, NH heads,
//   C channels (n_embd), HS = C / NH head size, B batch rows, N = B * T.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpt2 {

// How the initial weights are drawn (model/params.h, initial_weights):
//   philox    ours: N(0, 0.02) from Philox keyed by (seed, tensor, element);
//             any element computed alone, on any rank or device.
//   original  the reproduced project's scheme, exactly (DESIGN.md): srand(seed)
//             once, then glibc rand() through a single-precision Box-Muller,
//             tensor by tensor in their order and layout.
enum class InitKind { kPhilox, kOriginal };
InitKind parse_init_kind(const std::string& name);  // "philox" | "original"
std::string to_string(InitKind kind);
inline void from_string(const std::string& name, InitKind& kind) { kind = parse_init_kind(name); }

struct Gpt2Config {
  int V = 172;   // vocab_size
  int T = 256;   // block_size: the longest sequence (learned position rows)
  int L = 6;     // n_layer
  int NH = 6;    // n_head
  int C = 384;   // n_embd
  InitKind init = InitKind::kPhilox;  // how init_weights draws (the weights' function of train.seed)

  int head_size() const { return C / NH; }
  // Throws std::invalid_argument naming the field and the rule it breaks.
  // vocab_size 0 is accepted when `vocab_from_tokenizer` (a configuration
  // not yet resolved against its tokenizer).
  void validate(bool vocab_from_tokenizer = false) const;

  // The one list of this section's fields (util/fields.h).
  template <typename F>
  void visit_fields(F&& f) {
    f("vocab_size", V, "vocabulary rows of wte and lm_head; 0 = the tokenizer's vocabulary size");
    f("block_size", T, "longest sequence (rows of the position embedding)");
    f("n_layer", L, "transformer blocks");
    f("n_head", NH, "attention heads; must divide n_embd");
    f("n_embd", C, "channels");
    f("init", init,
      "initial weights from train.seed: philox (ours: Philox, any element alone) or original (the reproduced "
      "project's srand/rand Box-Muller, exactly; their seed was 1234)");
  }
  std::string describe() const;
  bool operator==(const Gpt2Config&) const = default;
};

// "original": the reproduced project's final configuration (DESIGN.md):
//   V 172, T 256, L 6, NH 6, C 384.
// "small": a few-layer model for tests: V 64, T 32, L 2, NH 4, C 64.
Gpt2Config preset(const std::string& name);
std::vector<std::string> preset_names();

// `model` with vocab_size 0 resolved to the tokenizer's vocabulary size.
// Throws std::invalid_argument naming model.vocab_size if the tokenizer has
// more tokens than the model has rows.
Gpt2Config resolve_vocab(Gpt2Config model, int tokenizer_vocab);

}  // namespace gpt2
