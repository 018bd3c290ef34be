#include "model/context_parallel.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace gpt2 {

void CpGroup::all_gather(Tensor, Tensor) { throw std::logic_error("CpGroup: this group has no all_gather"); }
void CpGroup::tree_reduce_scatter(Tensor, Tensor) {
  throw std::logic_error("CpGroup: this group has no tree_reduce_scatter");
}
void CpGroup::tree_sum(Tensor) { throw std::logic_error("CpGroup: this group has no tree_sum"); }
double CpGroup::tree_sum(double) { throw std::logic_error("CpGroup: this group has no tree_sum"); }

Tensor context_half(Tensor t, int part) {
  const int64_t rows = t.dim(0) / 2, per = t.numel() / t.dim(0);
  return Tensor(t.data + part * rows * per, {rows, t.dim(1), t.dim(2)});
}

namespace {

// Buffer `i` of two packed key/value blocks (2, B, L, KV).
Tensor slot(Tensor two, int i) {
  const int64_t per = two.numel() / 2;
  return Tensor(two.data + i * per, {two.dim(1), two.dim(2), two.dim(3)});
}

void check(const ContextCut& cp, Tensor qkv) {
  if (!cp.on() || cp.group == nullptr || qkv.dim(0) % 2 != 0) {
    throw std::logic_error("ring attention: needs a context-parallel group and an arena of head and tail chunks");
  }
}

// Each (query half, key half) pair of the arena's chunks and the block that
// arrived from rank `src`, in a fixed order: the keys of a chunk after the
// queries' own are not seen (skipped); those of the queries' own chunk are
// causal; earlier chunks' are all seen.
template <typename F>
void for_each_pair(const ContextCut& cp, int src, F&& f) {
  const ContextCut from{cp.size, src, nullptr};
  for (int q = 0; q < 2; ++q) {
    for (int k = 0; k < 2; ++k) {
      const int qi = cp.chunk(q), ki = from.chunk(k);
      if (ki <= qi) f(q, k, ki == qi);
    }
  }
}

}  // namespace

void ring_attention_forward(Backend& be, const ContextCut& cp, Tensor out, Tensor lse, Tensor qkv, Tensor kv, int NH,
                            int KVH) {
  check(cp, qkv);
  const int P = cp.size;
  Tensor cur = slot(kv, 0), next = slot(kv, 1);
  be.attention_kv_pack(cur, qkv, NH, KVH);
  bool seen[2] = {false, false};  // a query half's first block is written, the rest merged into it
  for (int s = 0; s < P; ++s) {
    const bool more = s + 1 < P;
    if (more) {
      be.synchronize();
      cp.group->start_shift(cur, next);  // on to the next rank while this block is computed
    }
    for_each_pair(cp, (cp.rank - s + P) % P, [&](int q, int k, bool causal) {
      be.attention_block_forward(context_half(out, q), context_half(lse, q), context_half(qkv, q), context_half(cur, k),
                                 NH, KVH, causal, seen[q]);
      seen[q] = true;
      if (more) cp.group->progress();
    });
    if (more) {
      cp.group->finish_shift();
      std::swap(cur, next);
    }
  }
}

void ring_attention_backward(Backend& be, const ContextCut& cp, Tensor dqkv, Tensor dout, Tensor out, Tensor lse,
                             Tensor qkv, Tensor kv, Tensor dkv, int NH, int KVH) {
  check(cp, qkv);
  const int P = cp.size;
  Tensor cur = slot(kv, 0), next = slot(kv, 1), dcur = slot(dkv, 0), dnext = slot(dkv, 1);
  be.zero(dqkv);  // the query columns accumulate over the blocks; the key and value columns come home last
  be.attention_kv_pack(cur, qkv, NH, KVH);
  be.zero(dcur);
  for (int s = 0; s < P; ++s) {
    const bool more = s + 1 < P;
    if (more) {
      be.synchronize();
      cp.group->start_shift(cur, next);
    }
    for_each_pair(cp, (cp.rank - s + P) % P, [&](int q, int k, bool causal) {
      be.attention_block_backward(context_half(dqkv, q), context_half(dcur, k), context_half(dout, q),
                                  context_half(out, q), context_half(lse, q), context_half(qkv, q),
                                  context_half(cur, k), NH, KVH, causal);
      if (more) cp.group->progress();
    });
    if (more) cp.group->finish_shift();
    // The block's gradient goes on with it; after the last step, to its owner (the next rank).
    be.synchronize();
    cp.group->start_shift(dcur, dnext);
    cp.group->finish_shift();
    std::swap(cur, next);
    std::swap(dcur, dnext);
  }
  be.attention_kv_unpack(dqkv, dcur, NH, KVH);
}

namespace {

// Moves rows between an arena cut by `cp` and the batch's whole rows: rank
// r's block of `blocks` (its arena, (2m, L, W): the head chunks, then the
// tail chunks) and `whole` (m, T, W), chunk by chunk; `to_whole` says which way.
void arrange_chunks(const ContextCut& cp, int64_t m, int64_t L, int64_t W, float* blocks, float* whole,
                    bool to_whole) {
  const int64_t T = 2 * cp.size * L, chunk = L * W;
  for (int r = 0; r < cp.size; ++r) {
    const ContextCut at{cp.size, r, nullptr};
    for (int half = 0; half < 2; ++half) {
      for (int64_t b = 0; b < m; ++b) {
        float* block = blocks + (int64_t{r} * 2 * m + half * m + b) * chunk;
        float* row = whole + (b * T + int64_t{at.chunk(half)} * L) * W;
        if (to_whole) std::copy_n(block, chunk, row);
        else std::copy_n(row, chunk, block);
      }
    }
  }
}

// The row's pair an arena's pieces start at: a context-parallel rank r
// holds chunks r and 2 cp - 1 - r, the pairs [r n, (r + 1) n) (kernels/sequence_pieces.h).
int64_t first_pair(const PieceOps& ops, const ContextCut& cp) {
  return cp.on() ? int64_t{cp.rank} * ops.pieces().pairs() : 0;
}

// qkv (2m, L, W) of every rank of `cp`, whole: buf.whole (m, T, W).
Tensor gather_whole(const ContextCut& cp, Tensor qkv, PieceBuffers& buf) {
  const int64_t Ba = qkv.dim(0), L = qkv.dim(1), W = qkv.dim(2), m = Ba / 2;
  const auto n = static_cast<size_t>(qkv.numel());
  buf.blocks.resize(n * static_cast<size_t>(cp.size));
  buf.whole.resize(n * static_cast<size_t>(cp.size));
  cp.group->all_gather(qkv, Tensor(buf.blocks.data(), {static_cast<int64_t>(buf.blocks.size())}));
  arrange_chunks(cp, m, L, W, buf.blocks.data(), buf.whole.data(), true);
  return Tensor(buf.whole.data(), {m, 2 * cp.size * L, W});
}

}  // namespace

void pieces_attention_forward(Backend& be, const ContextCut& cp, Tensor out, Tensor lse, Tensor qkv, int NH, int KVH,
                              PieceBuffers& buf) {
  PieceOps* ops = be.piece_ops();
  if (ops == nullptr) throw std::logic_error("pieces_attention_forward: the backend has no sequence pieces");
  const Tensor whole = cp.on() ? gather_whole(cp, qkv, buf) : qkv;
  ops->attention_pieces_forward(out, lse, qkv, whole, NH, KVH, first_pair(*ops, cp));
}

void pieces_attention_backward(Backend& be, const ContextCut& cp, Tensor dqkv, Tensor dout, Tensor out, Tensor lse,
                               Tensor qkv, int NH, int KVH, PieceBuffers& buf) {
  PieceOps* ops = be.piece_ops();
  if (ops == nullptr) throw std::logic_error("pieces_attention_backward: the backend has no sequence pieces");
  const int64_t Ba = qkv.dim(0), L = qkv.dim(1), W = qkv.dim(2), HS = W / (NH + 2 * KVH), KV = 2 * KVH * HS;
  const int64_t m = cp.on() ? Ba / 2 : Ba, T = cp.on() ? 2 * cp.size * L : L;
  const Tensor whole = cp.on() ? gather_whole(cp, qkv, buf) : qkv;
  buf.dkv.resize(static_cast<size_t>(m * T * KV));
  const Tensor dkv(buf.dkv.data(), {m, T, KV});
  ops->attention_pieces_backward(dqkv, dkv, dout, out, lse, qkv, whole, NH, KVH, first_pair(*ops, cp));
  if (!cp.on()) {
    be.attention_kv_unpack(dqkv, dkv, NH, KVH);
    return;
  }
  // Every rank's subtree of every key's gradient, to the key's owner in the tree's order.
  buf.blocks.resize(buf.dkv.size());
  buf.home.resize(static_cast<size_t>(Ba * L * KV));
  arrange_chunks(cp, m, L, KV, buf.blocks.data(), buf.dkv.data(), false);
  const Tensor home(buf.home.data(), {Ba, L, KV});
  cp.group->tree_reduce_scatter(Tensor(buf.blocks.data(), {static_cast<int64_t>(buf.blocks.size())}), home);
  be.attention_kv_unpack(dqkv, home, NH, KVH);
}

void context_rows(const int32_t* in, int32_t* out, int rows, int T, int cp, int cp_rank, int groups) {
  const ContextCut c{cp, cp_rank, nullptr};
  const int L = T / (2 * cp), m = rows / groups;
  for (int g = 0; g < groups; ++g) {
    for (int part = 0; part < 2; ++part) {
      for (int b = 0; b < m; ++b) {
        const int32_t* from = in + static_cast<int64_t>(g * m + b) * T + static_cast<int64_t>(c.chunk(part)) * L;
        out = std::copy(from, from + L, out);
      }
    }
  }
}

}  // namespace gpt2
