// Text generation: greedy or sampled, by full recomputation of the window
// (the reproduced project's method, kept for the reproduction) or with a
// key/value cache. Both paths give the same tokens: the cache path runs the
// same prefill as the recompute path, then one-token decode steps, and falls
// back to a fresh prefill whenever the window is full and must slide (learned
// absolute positions make cached keys invalid once the window moves).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend.h"
#include "params.h"

namespace gpt2 {

struct GenerateOptions {
  int max_new_tokens = 30;
  bool kv_cache = false;
  float temperature = 0.0f;  // 0: greedy (argmax); > 0: sample softmax(logits / temperature)
  int top_k = 0;             // sample among the k most likely tokens only; 0: all
  uint64_t seed = 0;         // sampling draws are Philox(seed, step): reproducible
  int vocab_limit = 0;       // only ids below this are produced (the tokenizer's size); 0: all V
};

struct Generation {
  std::vector<int32_t> tokens;  // the new tokens, [EOS] excluded
  bool stopped_at_eos = false;
};

// Continues `prompt` (non-empty; only its last block_size tokens are seen).
Generation generate(Backend& be, const Gpt2& model, std::span<const int32_t> prompt,
                    const GenerateOptions& opt, int32_t eos_id);

// The next token from one row of V logits: argmax when temperature == 0 (the
// first maximum on ties), otherwise a draw with uniform number u in (0, 1).
int32_t pick_token(std::span<const float> logits, float temperature, int top_k, double u);

}  // namespace gpt2
