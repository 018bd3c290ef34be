// Text generation: greedy or sampled, by full recomputation of the window
// (the reproduced project's method, kept for the reproduction) or with a
// key/value cache. Both paths give the same tokens: the cache path runs the
// same prefill as the recompute path, then one-token decode steps, and falls
// back to a fresh prefill whenever the window is full and must slide (learned
// absolute positions make cached keys invalid once the window moves).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "model/params.h"

namespace gpt2 {

// The generate section of a run's configuration, and what generate() takes.
struct GenerateConfig {
  int prompt_tokens = 256;   // the caller's prompt: the first N corpus tokens
  int max_new_tokens = 30;
  float temperature = 0.0f;  // 0: greedy (argmax); > 0: sample softmax(logits / temperature)
  int top_k = 0;             // sample among the k most likely tokens only; 0: all
  bool kv_cache = false;
  uint64_t seed = 0;         // sampling draws are Philox(seed, step): reproducible
  // Not a configuration key: only ids below this are produced (the caller
  // sets the tokenizer's size); 0: all V.
  int vocab_limit = 0;

  // Throws std::invalid_argument naming the key.
  void validate() const;

  // The one list of this section's fields (util/fields.h).
  template <typename F>
  void visit_fields(F&& f) {
    f("prompt_tokens", prompt_tokens, "prompt = the first N tokens of the corpus");
    f("max_new_tokens", max_new_tokens, "tokens to generate (stops early at [EOS])");
    f("temperature", temperature, "0 = greedy; > 0 samples softmax(logits / temperature)");
    f("top_k", top_k, "sample among the k most likely tokens; 0 = all");
    f("kv_cache", kv_cache, "use a key/value cache (same tokens as full recomputation)");
    f("seed", seed, "seed of the sampling draws");
  }
};

struct Generation {
  std::vector<int32_t> tokens;  // the new tokens, [EOS] excluded
  bool stopped_at_eos = false;
};

// Continues `prompt` (non-empty; only its last block_size tokens are seen).
// `on_token`, when given, is called with each new token as soon as it is
// chosen (the caller prints as it goes; the tokens are also returned).
Generation generate(Backend& be, const Gpt2& model, std::span<const int32_t> prompt,
                    const GenerateConfig& opt, int32_t eos_id,
                    const std::function<void(int32_t)>& on_token = {});

// The next token from one row of V logits: argmax when temperature == 0 (the
// first maximum on ties), otherwise a draw with uniform number u in (0, 1).
int32_t pick_token(std::span<const float> logits, float temperature, int top_k, double u);

}  // namespace gpt2
