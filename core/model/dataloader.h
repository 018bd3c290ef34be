// DataLoader: serves (inputs, targets) batches of token windows from a token
// stream, plus the train/validation split. Holds a view of the stream, not a
// copy: the tokens must outlive the loader. Does not tokenize (tokenizer.h).
// The stream is a TokenStream: the corpus's tokens, or token shards read as
// one concatenation (a window may span two shards; each document of a shard
// begins with <|endoftext|>, so that is a document boundary like any other).
//
// A global batch is B rows of T tokens; row b's targets are its window shifted
// by one token. Data-parallel ranks construct the same loader with disjoint
// [row_begin, row_begin + rows) and so take disjoint rows of the same global
// batch: R ranks see exactly what one rank with the whole batch sees.
//
//  * kSequential, the reproduced project's order: row b of the current step is
//    tokens[pos + b*T, pos + b*T + T); then pos += B*T, and if the next batch
//    would not fit (pos + B*T + 1 > n) pos wraps to 0.
//  * kRandom: row b of step s starts at floor(u * (n - T)) with
//    u = uniform01(seed, kDataStream, s*B + b), so start is in [0, n-T-1] and
//    window and target fit. A pure function of (seed, s, b): resumable.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "util/hash.h"

namespace gpt2 {

enum class LoaderKind { kSequential, kRandom };

std::string to_string(LoaderKind kind);  // "sequential" | "random"
// Throws std::invalid_argument naming data.loader and the bad name.
LoaderKind parse_loader_kind(const std::string& name);
inline void from_string(const std::string& name, LoaderKind& kind) { kind = parse_loader_kind(name); }

// Philox stream of the random loader's window starts. Parameter
// initialisation uses streams 0..(number of tensors - 1); this is far above.
inline constexpr uint32_t kDataStream = 0x44415441u;  // "DATA"

// What a loader reads windows from: the concatenation of one or more token
// arrays held elsewhere (the corpus's int32 stream; token shards' uint16 or
// uint32 tokens, read into memory, train/data/shards.h). A view: the arrays must
// outlive it.
class TokenStream {
 public:
  TokenStream() = default;
  TokenStream(std::span<const int32_t> tokens) { append(tokens); }  // NOLINT: a span is a stream
  void append(std::span<const int32_t> tokens) { add(tokens.data(), 4, tokens.size()); }
  void append(std::span<const uint16_t> tokens) { add(tokens.data(), 2, tokens.size()); }
  // uint32 ids must be below 2^31 (shards check theirs at load).
  void append(std::span<const uint32_t> tokens) { add(tokens.data(), 4, tokens.size()); }

  int64_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  // Tokens [begin, begin + out.size()) into out, across arrays where the
  // range spans them. The range must lie inside the stream.
  void read(int64_t begin, std::span<int32_t> out) const;
  // Tokens [begin, end) as a stream of their own.
  TokenStream slice(int64_t begin, int64_t end) const;
  std::vector<int32_t> to_vector() const;
  // FNV-1a 64 of the tokens as little-endian int32 (what fnv1a64 gives for
  // the same tokens in one int32 array), continuing from `h` (chain streams).
  uint64_t hash(uint64_t h = kFnvOffsetBasis) const;

 private:
  struct Part {
    const void* data;
    int width;       // bytes a token: 2 (uint16) or 4 (int32 / uint32 below 2^31)
    int64_t begin;   // of this part in the stream
    int64_t count;
  };
  void add(const void* data, int width, size_t count);
  std::vector<Part> parts_;
  int64_t n_ = 0;
};

struct Split {
  TokenStream train, val;
};

// The last floor(n * val_fraction) tokens are validation, the rest training.
// val_fraction must be in [0, 1), else std::invalid_argument naming
// data.val_fraction.
Split split_tokens(const TokenStream& tokens, double val_fraction);
inline Split split_tokens(std::span<const int32_t> tokens, double val_fraction) {
  return split_tokens(TokenStream(tokens), val_fraction);
}

class DataLoader {
 public:
  // rows = -1 means every row from row_begin to B (all B when row_begin = 0).
  // Throws std::invalid_argument on non-positive B or T, rows outside [0, B),
  // or a stream too short for one batch (sequential: B*T+1 tokens; random:
  // T+1).
  DataLoader(TokenStream tokens, int B, int T, LoaderKind kind, uint64_t seed, int row_begin = 0, int rows = -1);
  DataLoader(std::span<const int32_t> tokens, int B, int T, LoaderKind kind, uint64_t seed, int row_begin = 0,
             int rows = -1)
      : DataLoader(TokenStream(tokens), B, T, kind, seed, row_begin, rows) {}

  // Fills inputs and targets, each (rows, T) row-major, with this process's
  // rows of the next global batch, then advances. Allocates nothing.
  void next(int32_t* inputs, int32_t* targets);

  int rows() const { return rows_; }
  int B() const { return B_; }
  int T() const { return T_; }
  LoaderKind kind() const { return kind_; }

  // Resumable state. position: sequential, where the next global batch
  // starts in the stream (always 0 for random). batches_served: global
  // batches served so far (the random loader's step counter). A checkpoint
  // stores both; restore() reproduces the continuation. restore throws
  // std::invalid_argument if position is not a valid batch start for this
  // stream (sequential: 0 <= position, position + B*T + 1 <= n; random:
  // 0 <= position <= n, and ignored) or batches_served < 0.
  int64_t position() const { return pos_; }
  int64_t batches_served() const { return served_; }
  void restore(int64_t position, int64_t batches_served);

 private:
  TokenStream tokens_;
  int64_t n_;
  int B_, T_;
  LoaderKind kind_;
  uint64_t seed_;
  int row_begin_, rows_;
  int64_t pos_ = 0;
  int64_t served_ = 0;
};

}  // namespace gpt2
