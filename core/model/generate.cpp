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
                    const GenerateConfig& opt, int32_t eos_id, const std::function<void(int32_t)>& on_token) {
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
  // KV cache: per layer rows of q, k, v (this rank's heads); and a one-token
  // arena. With learned positions a row's keys belong to its position in the
  // window, so once the window slides the cache is rebuilt from a full
  // forward. With RoPE a key carries its absolute position's rotation and
  // stays valid as the window slides: the cache drops its oldest rows
  // instead. It holds 2T rows, so that the window moves down the buffer and
  // is copied back to the top once every T tokens (the copies never overlap).
  const int64_t width = cfg.qkv_width() / model.tp().size;
  const bool slide = cfg.rope();
  const int64_t cap = slide ? 2 * cfg.T : cfg.T;  // rows per layer
  Buffer cache_buf(opt.kv_cache ? static_cast<size_t>(cfg.L * cap * width) : 0, mem);
  auto layer_rows = [&](int l, int64_t row) { return cache_buf.data() + (l * cap + row) * width; };
  std::vector<Tensor> caches(opt.kv_cache ? static_cast<size_t>(cfg.L) : 0);
  std::optional<ActivationArena> one;
  if (opt.kv_cache) one.emplace(model, 1, 1);
  // With the vocabulary sharded each rank holds Vr logits of the row: they are
  // gathered (each rank's in its place, zeros elsewhere, summed over the group).
  const TpPlace& tp = model.tp();
  const int64_t row_width = tp.shape().vocab_rows(cfg.V);
  Buffer gathered(tp.shape().vocab ? static_cast<size_t>(tp.size * row_width) : 0, mem);
  std::vector<float> host_logits(static_cast<size_t>(cfg.V));  // the sampled row, on the host
  int cached = 0;  // tokens held in the cache: the `cached` tokens before the newest, from row `start`
  int64_t start = 0;

  for (int i = 0; i < opt.max_new_tokens; ++i) {
    const int n = static_cast<int>(seq.size());
    const int w = std::min(n, cfg.T);  // window: the last w tokens
    float* logits = nullptr;  // in the backend's memory
    if (opt.kv_cache && slide && cached + 1 > w) {  // the window slid: drop the rows that left it
      const int drop = cached + 1 - w;
      start += drop;
      cached -= drop;
    }
    if (opt.kv_cache && cached > 0 && cached == w - 1) {
      // The cache holds the window but its newest token: one decode step.
      if (start + w > cap) {  // out of rows: move the window to the top
        for (int l = 0; l < cfg.L; ++l) {
          be.copy(Tensor(layer_rows(l, 0), {1, cached, width}), Tensor(layer_rows(l, start), {1, cached, width}));
        }
        start = 0;
      }
      for (int l = 0; l < cfg.L; ++l) caches[static_cast<size_t>(l)] = Tensor(layer_rows(l, start), {1, cap - start, width});
      gpt2_decode(be, model, one->acts(), caches, seq.back(), w - 1, n - 1);
      logits = one->acts().logits.data;
      cached = w;
    } else {
      full.reshape(1, w);
      Activations& a = full.acts();
      // RoPE turns by absolute positions, as the cache's rows were (learned positions start at 0).
      gpt2_forward(be, model, a, seq.data() + (n - w), nullptr, slide ? n - w : 0);
      logits = a.logits.data + static_cast<int64_t>(w - 1) * row_width;
      if (opt.kv_cache) {
        for (int l = 0; l < cfg.L; ++l) {
          be.copy(Tensor(layer_rows(l, 0), {1, w, width}), a.layers[static_cast<size_t>(l)].qkv);
        }
        cached = w;
        start = 0;
      }
    }
    if (tp.shape().vocab) {
      const Tensor all(gathered.data(), {tp.size * row_width});
      be.zero(all);
      be.copy(Tensor(gathered.data() + tp.rank * row_width, {row_width}), Tensor(logits, {row_width}));
      tp.group->allreduce_sum(all);
      logits = gathered.data();
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
    if (on_token) on_token(next);
  }
  return out;
}

}  // namespace gpt2
