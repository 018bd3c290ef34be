// train.sequence_pieces' kernels on the CPU backend (kernels/sequence_pieces.h,
// Backend::piece_ops, kernels/cpu/pieces.cpp), suite core:
//  * every op of the table on a backend with sequence pieces (its weight,
//    bias and norm gradients pair trees, its products tiled inside pieces)
//    within its tolerance of the reference, and the same bits at 1 and 2
//    threads;
//  * the pieces' own operations against the plain kernels they reorder: the
//    attention (forward and backward), the token table's gradient, the loss's
//    sum;
//  * context parallelism's arithmetic in one process: an arena cut for cp 2
//    and 4 (each rank's head and tail chunks, model/context_parallel.h), each
//    rank's operations on its own rows, and its subtrees added over the ranks
//    in the tree's order (the group's tree sum and tree reduce-scatter) give
//    the serial backend's bits: the products' rows and weight and bias
//    gradients, the norms', the token table's, the loss's sum, and the
//    attention's output, log-sum-exps and gradients.
// The mpi stage's runs (serial's final parameters and moments on cp 2, cp 4,
// cp 2 x tp 2, ...) are in sequence_pieces_test.py.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend_ops.h"
#include "kernels/backend.h"
#include "kernels/ops/op_table.h"
#include "model/context_parallel.h"
#include "test_util.h"

namespace gpt2 {
namespace {

using testing::random_vec;

std::unique_ptr<Backend> pieces_backend(int threads, const SequencePieces& sp) {
  return make_cpu_backend(BackendOptions::with_threads(threads).with_deterministic(true).with_pieces(sp));
}

// Every op of the table on a pieces backend at the shapes whose T the pieces
// divide: within tolerance of the reference, and 2 threads give 1 thread's bits.
TEST(SequencePiecesOps, EveryOpOfTheTableWithPieces) {
  const std::vector<std::pair<ops::OpShape, std::vector<int>>> cases = {
      {ops::OpShape{3, 64, 128, 2, 172, 3 * 128 + 5, 172 * 128 + 3}, {2, 4, 8}},
      {ops::OpShape{2, 150, 96, 3, 37, 3 * 96 + 5, 37 * 96 + 3}, {2}}};
  for (const auto& [s, counts] : cases) {
    for (int S : counts) {
      const SequencePieces sp{S, s.T, 1};
      auto t1 = pieces_backend(1, sp), t2 = pieces_backend(2, sp);
      ASSERT_NE(t1->piece_ops(), nullptr);
      const std::string label = fmt::format("cpu-deterministic, {} pieces", S);
      testing::check_every_op(*t2, label + "/t2", s);
      testing::expect_thread_invariant(*t1, *t2, label, s);
    }
  }
}

// One serial arena (m rows of T tokens) and its cut for cp ranks.
struct Arena {
  int64_t m, T;
  // Rank r of cp's rows of `whole` ((m T, width) rows in batch order): the head chunks, then the tail chunks.
  template <typename V>
  V cut(const V& whole, int64_t width, int cp, int r) const {
    const ContextCut at{cp, r, nullptr};
    const int64_t L = T / (2 * cp);
    V out;
    for (int half = 0; half < 2; ++half) {
      for (int64_t b = 0; b < m; ++b) {
        const auto from = whole.begin() + (b * T + at.chunk(half) * L) * width;
        out.insert(out.end(), from, from + L * width);
      }
    }
    return out;
  }
};

// The balanced tree's sum over the ranks' vectors (rank order), element by element.
std::vector<float> tree_over_ranks(const std::vector<std::vector<float>>& parts, size_t lo, size_t n) {
  if (n == 1) return parts[lo];
  std::vector<float> left = tree_over_ranks(parts, lo, n / 2);
  const std::vector<float> right = tree_over_ranks(parts, lo + n / 2, n / 2);
  for (size_t i = 0; i < left.size(); ++i) left[i] = left[i] + right[i];
  return left;
}
double tree_over_ranks(const std::vector<double>& parts, size_t lo, size_t n) {
  if (n == 1) return parts[lo];
  const double left = tree_over_ranks(parts, lo, n / 2);
  return left + tree_over_ranks(parts, lo + n / 2, n / 2);
}

void expect_bits(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i] || std::signbit(got[i]) != std::signbit(want[i]);
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << got.size() << " elements differ";
}

Tensor view(std::vector<float>& v, std::initializer_list<int64_t> dims) { return Tensor(v.data(), dims); }

constexpr int64_t kM = 2, kT = 64, kC = 32, kOC = 48, kV = 29, kS = 8;

// The products, the norms and the token table: each cp rank's rows give serial's rows, and its gradient
// subtrees added over the ranks give serial's gradients.
TEST(SequencePiecesOps, ContextRanksGiveSerialsBitsForProductsNormsAndTheTokenTable) {
  const Arena arena{kM, kT};
  const int64_t N = kM * kT;
  std::vector<float> x = random_vec(N * kC, 1), w = random_vec(kOC * kC, 2), bias = random_vec(kOC, 3);
  std::vector<float> dout = random_vec(N * kOC, 4), dnorm = random_vec(N * kC, 5), nw = random_vec(kC, 6);
  std::vector<float> nb = random_vec(kC, 7), losses = random_vec(N, 8, 0.0f, 5.0f);
  const std::vector<int32_t> tokens = testing::random_tokens(static_cast<size_t>(N), kV, 9);
  struct Result {
    std::vector<float> out, dinp, dw, db, ln_dx, ln_dw, ln_db, dwte;
    double loss = 0;
  };
  // The ops on rows of m' batch rows under `sp` (serial: the arena itself; a rank: its cut).
  const auto run = [&](const SequencePieces& sp, const std::vector<float>& xs, const std::vector<float>& ds,
                       const std::vector<float>& dns, const std::vector<float>& ls, const std::vector<int32_t>& tk) {
    auto be = pieces_backend(2, sp);
    const int64_t n = static_cast<int64_t>(ls.size());
    std::vector<float> xv = xs, dv = ds, dnv = dns, lv = ls;
    Result r;
    r.out.assign(static_cast<size_t>(n * kOC), 0.0f);
    r.dinp.assign(static_cast<size_t>(n * kC), 0.0f);
    r.dw.assign(static_cast<size_t>(kOC * kC), 0.0f);
    r.db.assign(static_cast<size_t>(kOC), 0.0f);
    be->matmul_forward(view(r.out, {n, kOC}), view(xv, {n, kC}), view(w, {kOC, kC}), view(bias, {kOC}));
    be->matmul_backward(view(r.dinp, {n, kC}), view(r.dw, {kOC, kC}), view(r.db, {kOC}), view(dv, {n, kOC}),
                        view(xv, {n, kC}), view(w, {kOC, kC}));
    std::vector<float> ln(static_cast<size_t>(n * kC)), mean(static_cast<size_t>(n)), rstd(static_cast<size_t>(n));
    be->layernorm_forward(view(ln, {n, kC}), view(mean, {n}), view(rstd, {n}), view(xv, {n, kC}), view(nw, {kC}),
                          view(nb, {kC}));
    r.ln_dx.assign(static_cast<size_t>(n * kC), 0.0f);
    r.ln_dw.assign(static_cast<size_t>(kC), 0.0f);
    r.ln_db.assign(static_cast<size_t>(kC), 0.0f);
    be->layernorm_backward(view(r.ln_dx, {n, kC}), view(r.ln_dw, {kC}), view(r.ln_db, {kC}), view(dnv, {n, kC}),
                           view(xv, {n, kC}), view(nw, {kC}), view(mean, {n}), view(rstd, {n}));
    r.dwte.assign(static_cast<size_t>(kV * kC), 0.0f);
    be->piece_ops()->embedding_pieces_backward(view(r.dwte, {kV, kC}), view(dnv, {1, n, kC}), tk.data());
    r.loss = be->piece_ops()->sum_pieces(view(lv, {n}));
    return r;
  };
  const Result serial = run(SequencePieces::whole_rows(kS, kT), x, dout, dnorm, losses, tokens);
  for (int cp : {2, 4}) {
    std::vector<Result> ranks;
    for (int r = 0; r < cp; ++r) {
      ranks.push_back(run(SequencePieces::shared_rows(kS, kT, cp), arena.cut(x, kC, cp, r), arena.cut(dout, kOC, cp, r),
                          arena.cut(dnorm, kC, cp, r), arena.cut(losses, 1, cp, r), arena.cut(tokens, 1, cp, r)));
    }
    const auto over = [&](std::vector<float> Result::*f) {
      std::vector<std::vector<float>> parts;
      for (const Result& r : ranks) parts.push_back(r.*f);
      return tree_over_ranks(parts, 0, parts.size());
    };
    const std::string at = fmt::format("cp {}", cp);
    for (int r = 0; r < cp; ++r) {
      expect_bits(at + fmt::format(" rank {}: the product's rows", r), ranks[static_cast<size_t>(r)].out,
                  arena.cut(serial.out, kOC, cp, r));
      expect_bits(at + fmt::format(" rank {}: the input gradient's rows", r), ranks[static_cast<size_t>(r)].dinp,
                  arena.cut(serial.dinp, kC, cp, r));
      expect_bits(at + fmt::format(" rank {}: the norm's input gradient rows", r), ranks[static_cast<size_t>(r)].ln_dx,
                  arena.cut(serial.ln_dx, kC, cp, r));
    }
    expect_bits(at + ": the weight gradient", over(&Result::dw), serial.dw);
    expect_bits(at + ": the bias gradient", over(&Result::db), serial.db);
    expect_bits(at + ": the norm's weight gradient", over(&Result::ln_dw), serial.ln_dw);
    expect_bits(at + ": the norm's bias gradient", over(&Result::ln_db), serial.ln_db);
    expect_bits(at + ": the token table's gradient", over(&Result::dwte), serial.dwte);
    std::vector<double> sums;
    for (const Result& r : ranks) sums.push_back(r.loss);
    EXPECT_EQ(tree_over_ranks(sums, 0, sums.size()), serial.loss) << at << ": the loss's sum";
  }
  // The same functions as the plain kernels (another order of the same sums).
  auto plain = make_reference_backend();
  std::vector<float> dwte(static_cast<size_t>(kV * kC), 0.0f), dwpe(static_cast<size_t>(kT * kC), 0.0f);
  plain->encoder_backward(view(dwte, {kV, kC}), view(dwpe, {kT, kC}), view(dnorm, {kM, kT, kC}), tokens.data());
  EXPECT_TRUE(testing::all_close("the token table's tree against the reference", serial.dwte.data(), dwte.data(),
                                 dwte.size(), 1e-5, 1e-5));
  EXPECT_NEAR(serial.loss, plain->sum(view(losses, {N})), 1e-9 * static_cast<double>(N));
}

// The attention: against the reference's (the same function), and each cp rank's rows against whole rows in
// position order (the all-gathered q, k and v) give serial's output, log-sum-exps and query gradients, and
// its key and value gradient subtrees added over the ranks give serial's.
TEST(SequencePiecesOps, AttentionMatchesTheReferenceAndContextRanksGiveSerialsBits) {
  for (const auto& [NH, KVH] : {std::pair<int, int>{4, 4}, std::pair<int, int>{4, 2}}) {
    const Arena arena{kM, kT};
    const int64_t HS = 8, C = NH * HS, W = (NH + 2 * KVH) * HS, KV = 2 * KVH * HS, N = kM * kT;
    std::vector<float> qkv = random_vec(N * W, 11), dout = random_vec(N * C, 12);
    struct Result {
      std::vector<float> out, lse, dqkv, dkv;
    };
    const auto run = [&](const SequencePieces& sp, int rank, std::vector<float> q, std::vector<float> d) {
      auto be = pieces_backend(2, sp);
      const int64_t n = static_cast<int64_t>(q.size()) / W, rows = !sp.whole() ? 2 * kM : kM, len = n / rows;
      Result r;
      r.out.assign(static_cast<size_t>(n * C), 0.0f);
      r.lse.assign(static_cast<size_t>(n * NH), 0.0f);
      r.dqkv.assign(static_cast<size_t>(n * W), 7.0f);
      r.dkv.assign(static_cast<size_t>(N * KV), 0.0f);
      const Tensor whole(qkv.data(), {kM, kT, W});
      be->piece_ops()->attention_pieces_forward(view(r.out, {rows, len, C}), view(r.lse, {rows, NH, len}),
                                                view(q, {rows, len, W}), whole, NH, KVH, int64_t{rank} * sp.pairs());
      be->piece_ops()->attention_pieces_backward(
          view(r.dqkv, {rows, len, W}), view(r.dkv, {kM, kT, KV}), view(d, {rows, len, C}), view(r.out, {rows, len, C}),
          view(r.lse, {rows, NH, len}), view(q, {rows, len, W}), whole, NH, KVH, int64_t{rank} * sp.pairs());
      return r;
    };
    const Result serial = run(SequencePieces::whole_rows(kS, kT), 0, qkv, dout);
    // Against the reference: the output, the log-sum-exps, and dq, dk, dv (the pair tree unpacked).
    auto ref = make_reference_backend();
    std::vector<float> out(static_cast<size_t>(N * C)), lse(static_cast<size_t>(N * NH)), dqkv(qkv.size());
    ref->attention_forward(view(out, {kM, kT, C}), view(lse, {kM, NH, kT}), view(qkv, {kM, kT, W}), NH, KVH);
    ref->attention_backward(view(dqkv, {kM, kT, W}), view(dout, {kM, kT, C}), view(out, {kM, kT, C}),
                            view(lse, {kM, NH, kT}), view(qkv, {kM, kT, W}), NH, KVH);
    std::vector<float> unpacked = serial.dqkv, dkv = serial.dkv;
    pieces_backend(1, SequencePieces::whole_rows(kS, kT))
        ->attention_kv_unpack(view(unpacked, {kM, kT, W}), view(dkv, {kM, kT, KV}), NH, KVH);
    const std::string heads = fmt::format("NH {} KVH {}", NH, KVH);
    EXPECT_TRUE(testing::all_close(heads + " output", serial.out.data(), out.data(), out.size(), 1e-5, 1e-5));
    EXPECT_TRUE(testing::all_close(heads + " lse", serial.lse.data(), lse.data(), lse.size(), 1e-5, 1e-5));
    EXPECT_TRUE(testing::all_close(heads + " dqkv", unpacked.data(), dqkv.data(), dqkv.size(), 1e-5, 1e-4));
    for (int cp : {2, 4}) {
      std::vector<std::vector<float>> dkvs;
      for (int r = 0; r < cp; ++r) {
        const Result got =
            run(SequencePieces::shared_rows(kS, kT, cp), r, arena.cut(qkv, W, cp, r), arena.cut(dout, C, cp, r));
        const std::string at = fmt::format("{} cp {} rank {}", heads, cp, r);
        expect_bits(at + ": the output rows", got.out, arena.cut(serial.out, C, cp, r));
        // lse (rows, NH, len): compare through (row, head) order, as the output's rows.
        std::vector<float> mine, want;
        const int64_t len = kT / (2 * cp), rows = 2 * kM;
        const ContextCut cut{cp, r, nullptr};
        for (int64_t row = 0; row < rows; ++row) {
          const int64_t b = row % kM, chunk = cut.chunk(static_cast<int>(row / kM));
          for (int64_t h = 0; h < NH; ++h) {
            for (int64_t i = 0; i < len; ++i) {
              mine.push_back(got.lse[static_cast<size_t>((row * NH + h) * len + i)]);
              want.push_back(serial.lse[static_cast<size_t>((b * NH + h) * kT + chunk * len + i)]);
            }
          }
        }
        expect_bits(at + ": the log-sum-exps", mine, want);
        std::vector<float> dq = got.dqkv, dq_serial = arena.cut(serial.dqkv, W, cp, r);
        for (size_t i = 0; i < dq.size(); ++i) {
          if (static_cast<int64_t>(i) % W >= NH * HS) dq[i] = dq_serial[i] = 0.0f;  // the query columns only
        }
        expect_bits(at + ": the query gradient rows", dq, dq_serial);
        dkvs.push_back(got.dkv);
      }
      expect_bits(heads + fmt::format(" cp {}: the key and value gradients over the ranks", cp),
                  tree_over_ranks(dkvs, 0, dkvs.size()), serial.dkv);
    }
  }
}

}  // namespace
}  // namespace gpt2
