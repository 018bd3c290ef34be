// Host-side grouping of positions by token for the deterministic dwte
// backward (kernels.h, encoder_backward_wte): positions stably sorted by
// token, one bucket per distinct token. Small and host-only, so inline.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace gpt2::cuda {

struct TokenBuckets {
  std::vector<int32_t> bucket_token;  // (num_buckets) the token of each bucket, ascending
  std::vector<int32_t> starts;        // (num_buckets + 1) bucket i is order[starts[i] .. starts[i+1])
  std::vector<int32_t> order;         // (N) positions sorted by token, ascending within a token
  int num_buckets() const { return static_cast<int>(bucket_token.size()); }
};

inline TokenBuckets make_token_buckets(const int32_t* tokens, int N) {
  TokenBuckets tb;
  tb.order.resize(static_cast<size_t>(N));
  std::iota(tb.order.begin(), tb.order.end(), 0);
  // Stable: within a token the positions stay ascending, the reference's order.
  std::stable_sort(tb.order.begin(), tb.order.end(), [&](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
  for (int k = 0; k < N; ++k) {
    if (k == 0 || tokens[tb.order[k]] != tokens[tb.order[k - 1]]) {
      tb.bucket_token.push_back(tokens[tb.order[k]]);
      tb.starts.push_back(k);
    }
  }
  tb.starts.push_back(N);
  return tb;
}

}  // namespace gpt2::cuda
