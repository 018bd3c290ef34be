// train.sequence_pieces under train.deterministic (docs/determinism.md,
// "Sequence pieces"): the canonical cut of every row of the batch that lets
// context parallelism give serial's bits.
//
// Each row of T tokens is cut into S pieces of T / S tokens (S a power of
// two), and the pieces are paired in the folded order: pair p holds pieces
// p and S - 1 - p. A context-parallel rank r of cp holds the chunks r and
// 2 cp - 1 - r of every row (model/context_parallel.h), which are exactly
// the pairs [r n, (r + 1) n), n = S / (2 cp): an aligned run of pairs. So
// every sum over a batch's tokens is defined as a balanced binary tree over
// the pairs, each pair's leaf its rows in one canonical order (every row's
// head piece in batch order, then every row's tail piece), and a rank's
// pairs are one subtree of it, which a tree sum over the group finishes.
// Serial holds whole rows (cp 1): its arena is (m, T), the head half
// [0, T/2) of each row and the tail half [T/2, T). The kernels see only
// that: whole rows, or rows shared out in chunk pairs, and which pair an
// arena holds first (SequencePieces below).
//
// Every product's row tiles are cut inside pieces too, so that a product's
// rows are the same products (the same sizes) whichever rank holds them.
#pragma once

#include <algorithm>
#include <cstdint>

namespace gpt2 {

struct SequencePieces {
  int pieces = 1;  // S pieces a row (1: off)
  int64_t T = 0;   // tokens a row of the batch (train.seq_len)
  // Pairs of every row an arena holds: S / 2 when it holds whole rows; fewer
  // when each row is shared out over several arenas in chunk pairs (issue 69:
  // the kernels see rows and pieces, not the ranks that share them).
  int held = 0;

  // Whole rows: an arena (m, T), each row's head half then its tail half.
  static SequencePieces whole_rows(int S, int64_t T) { return {S, T, S / 2}; }
  // Each row shared out over `shares` arenas, each holding two chunks of it
  // (S / (2 shares) pairs): rows [0, m) its head chunks, [m, 2 m) its tails.
  static SequencePieces shared_rows(int S, int64_t T, int shares) { return {S, T, S / (2 * shares)}; }

  bool on() const { return pieces > 1; }
  bool whole() const { return 2 * held == pieces; }
  int64_t piece_rows() const { return T / pieces; }
  // Pairs an arena holds: its head chunk's pieces (and as many of its tail's).
  int pairs() const { return held; }
  // Tokens of a batch row in an arena.
  int64_t local_tokens() const { return 2 * int64_t{held} * piece_rows(); }
  // Rows of the batch in an arena of N token rows.
  int64_t batch_rows(int64_t N) const { return N / local_tokens(); }
  // The first arena row of local pair j's `half` piece (0: the head's, 1:
  // the tail's) of batch row b, of m batch rows. Whole rows: row b of T
  // tokens, the head half first. Shared rows: the arena's rows [0, m) are
  // the head chunks of L = T / (2 shares) tokens, [m, 2 m) the tail chunks;
  // the tail's pieces run the other way (pair j's is the tail chunk's n-1-j).
  int64_t row0(int64_t m, int64_t b, int j, int half) const {
    const int64_t pr = piece_rows(), n = pairs();
    if (whole()) return b * T + (half == 0 ? j * pr : T / 2 + (n - 1 - j) * pr);
    const int64_t L = local_tokens() / 2;
    return half == 0 ? b * L + j * pr : (m + b) * L + (n - 1 - j) * pr;
  }
  // The piece of the row (0 .. S-1) that local pair j's `half` is, in an
  // arena whose first pair is the row's pair `first_pair`.
  int64_t global_piece(int j, int half, int64_t first_pair) const {
    const int64_t p = first_pair + j;
    return half == 0 ? p : pieces - 1 - p;
  }
  // f(first row, rows) over local pair j's pieces in the canonical order, for an arena of N rows.
  template <typename F>
  void for_pair(int64_t N, int j, F&& f) const {
    const int64_t m = batch_rows(N), pr = piece_rows();
    for (int half = 0; half < 2; ++half) {
      for (int64_t b = 0; b < m; ++b) f(row0(m, b, j, half), pr);
    }
  }
  // f(first position, first arena row) of each query tile of `tile` rows
  // (a divisor of the piece's rows) of batch row b's local pair j in an
  // arena whose first pair is `first_pair`, of m batch rows: the head
  // piece's tiles, then the tail piece's.
  template <typename F>
  void for_pair_tiles(int64_t m, int64_t b, int j, int64_t first_pair, int64_t tile, F&& f) const {
    const int64_t pr = piece_rows();
    for (int half = 0; half < 2; ++half) {
      const int64_t g = global_piece(j, half, first_pair), r0 = row0(m, b, j, half);
      for (int64_t k0 = 0; k0 < pr; k0 += tile) f(g * pr + k0, r0 + k0);
    }
  }
  // Rows of one pair's leaf in an arena of N rows.
  int64_t pair_rows(int64_t N) const { return 2 * batch_rows(N) * piece_rows(); }
  // The row tiles of a product: the largest divisor of a piece's rows up to `most`.
  int row_tile(int most) const {
    const int64_t pr = piece_rows();
    for (int64_t t = std::min<int64_t>(pr, most); t > 1; --t) {
      if (pr % t == 0) return static_cast<int>(t);
    }
    return 1;
  }
};

}  // namespace gpt2
