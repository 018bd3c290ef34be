#include "model/generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <stdexcept>

#include "model/activations.h"
#include "kernels/buffer.h"
#include "model/model.h"
#include "model/rng.h"

namespace gpt2 {

namespace {
constexpr uint32_t kSamplingStream = 0x53414D50u;  // "SAMP": Philox stream for sampling draws
}

void GenerateConfig::validate() const {
  auto fail = [](const char* key, const std::string& what) {
    throw std::invalid_argument(fmt::format("generate.{}: {}", key, what));
  };
  if (prompt_tokens <= 0) fail("prompt_tokens", fmt::format("must be positive, got {}", prompt_tokens));
  if (max_new_tokens < 0) fail("max_new_tokens", fmt::format("must be >= 0, got {}", max_new_tokens));
  if (temperature < 0) fail("temperature", fmt::format("must be >= 0, got {}", temperature));
  if (top_k < 0) fail("top_k", fmt::format("must be >= 0, got {}", top_k));
}

int32_t pick_token(std::span<const float> logits, float temperature, int top_k, double u) {
  const int V = static_cast<int>(logits.size());
  if (temperature <= 0.0f) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Candidates in decreasing logit order (index order on ties), cut to top_k.
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const int k = top_k > 0 ? std::min(top_k, V) : V;
  std::vector<double> w(static_cast<size_t>(k));
  const double maxv = logits[order[0]];
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += w[i] = std::exp((logits[order[i]] - maxv) / temperature);
  double target = u * sum, acc = 0;
  for (int i = 0; i < k; ++i) {
    acc += w[i];
    if (target < acc) return order[i];
  }
  return order[k - 1];
}

Generation generate(Backend& be, const Gpt2& model, std::span<const int32_t> prompt,
                    const GenerateConfig& opt, int32_t eos_id) {
  const Gpt2Config& cfg = model.config();
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt is empty");
  if (opt.max_new_tokens < 0) {
    throw std::invalid_argument(fmt::format("generate.max_new_tokens must be >= 0, got {}", opt.max_new_tokens));
  }
  for (int32_t t : prompt) {
    if (t < 0 || t >= cfg.V) {
      throw std::invalid_argument(fmt::format("generate: prompt token id {} outside the vocabulary (V={})", t, cfg.V));
    }
  }
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  Generation out;
  Memory& mem = be.memory();
  ActivationArena full(model, 1, cfg.T);
  // KV cache: per layer (1, T, 3C/P) rows of q, k, v (this rank's heads); and a one-token arena.
  const int64_t width = 3 * cfg.C / model.tp().size;
  Buffer cache_buf(opt.kv_cache ? static_cast<size_t>(cfg.L * cfg.T * width) : 0, mem);
  std::vector<Tensor> caches;
  for (int l = 0; opt.kv_cache && l < cfg.L; ++l) {
    caches.emplace_back(cache_buf.data() + static_cast<size_t>(l * cfg.T * width),
                        std::initializer_list<int64_t>{1, cfg.T, width});
  }
  std::optional<ActivationArena> one;
  if (opt.kv_cache) one.emplace(model, 1, 1);
  std::vector<float> host_logits(static_cast<size_t>(cfg.V));  // the sampled row, on the host
  int cached = 0;  // positions held in the cache for the current window start

  for (int i = 0; i < opt.max_new_tokens; ++i) {
    const int n = static_cast<int>(seq.size());
    const int w = std::min(n, cfg.T);  // window: the last w tokens, at positions 0 .. w-1
    const float* logits = nullptr;  // in the backend's memory
    if (opt.kv_cache && cached > 0 && cached == w - 1) {
      // The window grew by one and did not slide: one decode step.
      gpt2_decode(be, model, one->acts(), caches, seq.back(), w - 1);
      logits = one->acts().logits.data;
      cached = w;
    } else {
      full.reshape(1, w);
      Activations& a = full.acts();
      gpt2_forward(be, model, a, seq.data() + (n - w), nullptr);
      logits = a.logits.data + static_cast<int64_t>(w - 1) * cfg.V;
      if (opt.kv_cache) {
        for (int l = 0; l < cfg.L; ++l) {
          Tensor qkv = a.layers[static_cast<size_t>(l)].qkv;  // (1,w,3C)
          be.copy(Tensor(caches[static_cast<size_t>(l)].data, {1, w, width}), qkv);
        }
        cached = w;
      }
    }
    mem.download(host_logits.data(), logits, host_logits.size() * sizeof(float));
    const double u = uniform01(opt.seed, kSamplingStream, static_cast<uint64_t>(i));
    // Rows of wte/lm_head beyond the tokenizer's vocabulary (model.vocab_size
    // larger than it) are never produced: they decode to nothing.
    const int limit = opt.vocab_limit > 0 ? std::min(opt.vocab_limit, cfg.V) : cfg.V;
    const int32_t next = pick_token({host_logits.data(), static_cast<size_t>(limit)}, opt.temperature, opt.top_k, u);
    if (next == eos_id) {
      out.stopped_at_eos = true;
      break;
    }
    seq.push_back(next);
    out.tokens.push_back(next);
  }
  return out;
}

}  // namespace gpt2
