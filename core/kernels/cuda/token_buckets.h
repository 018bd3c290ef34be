// Host-side grouping of positions by token for the deterministic dwte
// backward (kernels.h, encoder_backward_wte): a stable counting sort of the
// positions by token, one bucket per distinct token. The CUDA backend runs it
// every step on the host tokens; the tests use it to drive the kernel.
#pragma once

#include <cstdint>
#include <vector>

namespace gpt2::cuda {

struct TokenBuckets {
  std::vector<int32_t> bucket_token;  // (num_buckets) the token of each bucket, ascending
  std::vector<int32_t> starts;        // (num_buckets + 1) bucket i is order[starts[i] .. starts[i+1])
  std::vector<int32_t> order;         // (N) positions sorted by token, ascending within a token
  std::vector<int32_t> count;         // (V + 1) working space of the counting sort
  int num_buckets() const { return static_cast<int>(bucket_token.size()); }
};

// Fills `tb` for tokens (N) in [0, V); a negative token (one of another
// vocabulary shard) is in no bucket. Reusing one TokenBuckets allocates
// nothing once its vectors have grown to the largest N and V.
inline void make_token_buckets(const int32_t* tokens, int N, int V, TokenBuckets& tb) {
  tb.count.assign(static_cast<size_t>(V) + 1, 0);
  int kept = 0;
  for (int n = 0; n < N; ++n) {
    if (tokens[n] < 0) continue;
    ++tb.count[static_cast<size_t>(tokens[n]) + 1];
    ++kept;
  }
  tb.bucket_token.clear();
  tb.starts.clear();
  for (int v = 0; v < V; ++v) {
    const size_t i = static_cast<size_t>(v);
    if (tb.count[i + 1] > 0) {
      tb.bucket_token.push_back(v);
      tb.starts.push_back(tb.count[i]);
    }
    tb.count[i + 1] += tb.count[i];  // now: the first position of token v + 1
  }
  tb.starts.push_back(kept);
  tb.order.resize(static_cast<size_t>(kept));
  for (int n = 0; n < N; ++n) {
    if (tokens[n] >= 0) tb.order[static_cast<size_t>(tb.count[static_cast<size_t>(tokens[n])]++)] = n;
  }
}

inline TokenBuckets make_token_buckets(const int32_t* tokens, int N) {
  int V = 0;
  for (int n = 0; n < N; ++n) V = tokens[n] + 1 > V ? tokens[n] + 1 : V;
  TokenBuckets tb;
  make_token_buckets(tokens, N, V, tb);
  return tb;
}

}  // namespace gpt2::cuda
