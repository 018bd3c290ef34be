// A run's plan from the engine's own functions (see plan.h).
#include "train/resolve/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "kernels/exact_sum.h"
#include "model/activations.h"
#include "model/flops.h"
#include "model/optim.h"
#include "parallel/process_grid.h"
#include "parallel/zero.h"
#include "train/data/corpus.h"
#include "train/formats/model_source.h"
#include "train/formats/sharded_checkpoint.h"
#include "train/resolve/layout.h"
#include "train/schedule/pipeline.h"
#include "train/schedule/train_step.h"
#include "train/schedule/virtual_schedule.h"
#include "util/fields.h"

namespace gpt2 {

uint64_t zero_formula_bytes(size_t params, int N, int zero_stage, bool contiguous) {
  const double psi = static_cast<double>(params), n = static_cast<double>(N);
  const int s = contiguous ? 1 : zero_stage;
  const double per = s == 0 ? 16.0 : s == 1 ? 8.0 + 8.0 / n : s == 2 ? 4.0 + 12.0 / n : 16.0 / n;
  return static_cast<uint64_t>(std::llround(per * psi));
}

void set_arena(RankMemory& m, const ArenaKinds& k) {
  m.arena_embed = k.embed * sizeof(float);
  m.arena_layers = k.layers * sizeof(float);
  m.arena_head = k.head * sizeof(float);
  m.arena_scratch = k.scratch * sizeof(float);
  m.arena = k.total() * sizeof(float);
}

namespace {

// What a rank's plan is worked out from.
struct RankShape {
  const RunConfig& c;
  int seq_len = 0;  // a row's tokens as the step sees them (RunLayout::shape: context parallelism's chunk)
  const Gpt2Config& cfg;
  TpPlace tp;
  StageLayers layers;
  int dp = 1, dp_rank = 0, stage = 0, rows = 0;
  std::vector<ParamUnit> units;  // the rank's (its tp shard of its stage)
  UnitShards shards;             // its unit-aligned ZeRO shards (stages 2 and 3 without a schedule), else empty
  StepSpec step;                 // the step it runs and what it keeps (train/resolve/layout.h)
  const StageSplit* split = nullptr;  // the (virtual) stages' ranks (train/schedule/stage_split.h)
  // Under a schedule, every pipeline rank's action list (schedule_lists), made once for the plan.
  const std::vector<std::vector<ChunkAction>>* lists = nullptr;
  const ZeroSharding& zero() const { return step.zero; }
  bool sharded() const { return step.grad_sum == GradSum::kUnitShards; }
};

// The ranges of its part (n floats) the rank's moments hold, as the
// optimizer's scope has them (make_model): ZeRO-1's contiguous shard of the
// padded buffer, ZeRO-2/3's unit pieces; none: the whole part.
std::vector<ShardRange> moment_ranges(const RankShape& r, size_t n) {
  if (r.zero().contiguous) {
    const size_t dp = static_cast<size_t>(r.dp);
    const ContiguousShard z = contiguous_shard(n, (n + dp - 1) / dp * dp, r.dp, r.dp_rank);
    return {{z.begin, z.end, 0}};
  }
  return r.sharded() ? r.shards.ranges : std::vector<ShardRange>{};
}

// The buffers a rank allocates (init_or_resume, build_step), by size.
RankMemory plan_memory(const RankShape& r) {
  RankMemory m;
  const size_t n = param_count(r.cfg, r.tp.shape(), r.layers);
  const size_t pad_to = r.zero().contiguous ? static_cast<size_t>(r.dp) : 1;
  const size_t padded = (n + pad_to - 1) / pad_to * pad_to;
  const bool sharded = r.sharded();
  const UnitShards& shards = r.shards;
  UpdateScope scope;
  scope.ranges = moment_ranges(r, n);
  m.params = (r.zero().residency == Residency::kNone ? shards.shard_floats : padded) * sizeof(float);
  m.grads = (r.zero().residency == Residency::kWhole ? padded : shards.shard_floats) * sizeof(float);
  m.moments = 2 * scope_floats(scope, n) * sizeof(float);
  if (sharded) m.comm_buffers = 2 * shards.max_padded * sizeof(float);
  if (r.zero().zero_stage == 3) m.gathered = 2 * shards.max_padded * sizeof(float);
  const StepSpec& sl = r.step;
  // One arena of a canonical chunk, of a microbatch, or of the replica's rows.
  TpShape shape = r.tp.shape();
  shape.sequence = sl.sequence_parallel;
  shape.context = r.c.parallel.cp;
  if (!sl.pipelined()) {  // one arena
    set_arena(m, arena_kinds(r.cfg, sl.arena_rows, r.seq_len, shape, r.tp.has_private(), r.layers,
                             sl.split_backward, sl.recompute_full, sl.stored));
  } else {  // each chunk's arenas, one per microbatch it holds at once (one chunk: the stage's); the largest named
    const int v = r.layers.chunks();
    const std::vector<int> per = chunk_in_flight((*r.lists)[static_cast<size_t>(r.stage)], v);
    m.arenas = 0;
    uint64_t largest = 0;
    for (int c = 0; c < v; ++c) {
      const ArenaKinds k = arena_kinds(r.cfg, sl.arena_rows, r.seq_len, shape, r.tp.has_private(),
                                       r.layers.chunk(c, r.cfg.L), sl.split_backward, sl.recompute_full, sl.stored);
      const uint64_t bytes = k.total() * sizeof(float);
      m.arenas += static_cast<uint64_t>(per[static_cast<size_t>(c)]);
      if (v > 1) m.chunk_arenas += bytes * static_cast<uint64_t>(per[static_cast<size_t>(c)]);
      if (bytes > largest) {
        largest = bytes;
        set_arena(m, k);
      }
    }
  }
  if (sl.step == StepKind::kChunks) {  // the chunks' tree buffers
    const size_t shard_chunk = r.zero().contiguous ? contiguous_shard(n, padded, r.dp, r.dp_rank).chunk : 0;
    const bool root_in_model = sl.grad_sum != GradSum::kUnitShards;  // ZeRO-3's model holds no gradient
    m.comm_buffers += deterministic_buffer_floats(n, sl.chunks, r.dp, shard_chunk, root_in_model) * sizeof(float);
  } else if (sl.step == StepKind::kChunkPipeline) {  // the microbatch tree's buffers (PipelineEngine), a partner's
    const auto buffers = static_cast<uint64_t>(PipelineEngine::tree_buffers(static_cast<int>(m.arenas),
                                                                            sl.microbatches));
    m.comm_buffers += (buffers + (r.dp > 1 ? 1 : 0)) * n * sizeof(float);
  }
  m.count = n;
  m.formula = zero_formula_bytes(n, r.dp, r.zero().zero_stage, r.zero().contiguous);
  return m;
}


// What a rank's tensor-parallel sums are counted over (tp_traffic).
struct TpCounts {
  bool det = false;     // train.deterministic: every sum a tree_sum
  uint64_t C = 0;       // channels
  uint64_t m = 0;       // the microbatches (or canonical chunks) of the rank's step
  uint64_t N = 0;       // the replica's rows x seq_len over all microbatches
  uint64_t rounds = 0;  // log2(tp): a tree_sum's send_recv calls
};

TpCounts tp_counts(const RankShape& r) {
  TpCounts k;
  k.det = r.step.deterministic();
  k.C = static_cast<uint64_t>(r.cfg.C);
  k.m = static_cast<uint64_t>(r.step.step == StepKind::kChunks ? r.step.chunks / r.dp : r.step.microbatches);
  k.N = static_cast<uint64_t>(r.rows) * static_cast<uint64_t>(r.seq_len);
  for (int bit = 1; bit < r.tp.size; bit <<= 1) ++k.rounds;
  return k;
}

// The vocabulary cut's sums: the embedding's on the first stage (two under
// context parallelism), the loss's statistics and the head's input gradient
// on the last.
void vocab_traffic(const RankShape& r, const TpCounts& k, uint64_t& calls, uint64_t& bytes) {
  const uint64_t C = k.C, m = k.m, N = k.N;
  const uint64_t P = static_cast<uint64_t>(r.tp.size);
  if (r.layers.embed) {  // context parallelism embeds its head and tail chunks apart: two sums of half each
    calls += m * (r.c.parallel.cp > 1 ? 2 : 1);
    bytes += N * C * sizeof(float);
  }
  if (r.layers.head) {
    calls += 2 * m;
    bytes += ((P + 1) * N + N * C) * sizeof(float);
  }
}

// Sequence parallelism (pre-norm tp blocks): per layer 2 all-gathers and 2 reduce-scatters of N x C forward;
// backward 4 all-gathers (2 output gradients, the 2 norms' outputs again) and 2 reduce-scatters, and one sum of
// the norms' 4 x C gradients; the head gathers the final norm's output (N x C) and sums its 2 x C gradients;
// the embedding's backward gathers its N x C gradient. Each gather and scatter counts its whole buffer, as an
// allreduce does. Recomputation runs each layer's forward again in the backward, but the stage's last.
// Under train.deterministic each reduce-scatter is a tree's (log2(tp) send_recv calls, level k sending and
// receiving N x C / 2^k floats), the norms' sums are gone, and each norm's backward (the final one's too)
// gathers its output gradient (the layers'), its input and its statistics (N floats each, 1 or 2).
// The split backward (zb-h1) gathers 2 more per layer: B its two output gradients, W those and the norms' outputs.
// With bf16 stored activations the norms' outputs are gathered as bf16 (2 bytes an element), the rest as floats.
void sequence_parallel_traffic(const RankShape& r, const TpCounts& k, uint64_t& calls, uint64_t& bytes) {
  const uint64_t C = k.C, m = k.m, N = k.N;
  const uint64_t layers = static_cast<uint64_t>(r.layers.last - r.layers.first);
  const uint64_t again = r.step.recompute_full ? layers - 1 : 0;
  const uint64_t split = r.step.split_backward ? layers * 2 : 0;
  const uint64_t f = sizeof(float), ln = dtype_bytes(r.step.stored);
  calls += split * m;
  bytes += split * N * C * f;
  if (!k.det) {
    calls += (layers * 11 + again * 4) * m;
    bytes += layers * ((6 * N * C + 4 * C * m) * f + 4 * N * C * ln) + again * 2 * N * C * (f + ln);
    if (r.layers.head) {
      calls += 2 * m;
      bytes += N * C * ln + 2 * C * m * f;
    }
  } else {
    const uint64_t stats = r.cfg.rms() ? 1 : 2;
    uint64_t scatter = 0;  // one tree reduce-scatter's bytes, over the chunks
    for (uint64_t i = 1; i <= k.rounds; ++i) scatter += 2 * ((N * C) >> i) * f;
    calls += (layers * (6 + 2 * (2 + stats) + 4 * k.rounds) + again * (2 + 2 * k.rounds)) * m;
    bytes += layers * (10 * N * C * f + 2 * stats * N * f + 4 * scatter) + again * (2 * N * C * f + 2 * scatter);
    if (r.layers.head) {
      calls += (2 + stats) * m;
      bytes += (2 * N * C + stats * N) * f;
    }
  }
  if (r.layers.embed) {
    calls += m;
    bytes += N * C * f;
  }
}

// Without sequence parallelism: each `tp` layer's 4 sums a microbatch (6
// recomputed), each private run's 2; under det each sum a tree_sum.
void layer_traffic(const RankShape& r, const TpCounts& k, uint64_t& calls, uint64_t& bytes) {
  const uint64_t C = k.C, m = k.m, N = k.N;
  // A sum of `floats` floats: an allreduce, or under det a tree_sum.
  const uint64_t per_call = k.det ? k.rounds : 1, per_float = k.det ? 2 * k.rounds * sizeof(float) : sizeof(float);
  for (int c = 0; c < r.layers.chunks(); ++c) {  // each chunk's layers (virtual stages: several a rank)
    const StageLayers chunk = r.layers.chunk(c, r.cfg.L);
    for (int l = chunk.first; l < chunk.last;) {
      if (!r.tp.is_private(l)) {
        // Recomputation runs the layer's forward again in the backward (its two sums), but the chunk's last.
        const uint64_t again = r.step.recompute_full && l != chunk.last - 1 ? 2 : 0;
        calls += (4 + again) * m * per_call;
        bytes += (4 + again) * N * C * per_float;
        ++l;
        continue;
      }
      int run = 1;
      while (!r.tp.ends_run(l + run - 1)) ++run;
      calls += 2 * m;
      bytes += (2 * N * C + 6 * C * static_cast<uint64_t>(run) * m) * sizeof(float);
      l += run;
    }
  }
}

// The tensor-parallel sums of a step (docs/tensor_parallel.md,
// "Communication"), N = the replica's rows x seq_len over all microbatches:
// per `tp` layer 4 per microbatch (2 forward, 2 backward) of N x C floats
// in all; per private run of k layers 2 per microbatch, N x C floats forward
// and N x C + 6 x C x k per microbatch backward; one double (the shards'
// squared gradient norm). With the vocabulary sharded, per microbatch: the
// embedding's sum (N x C in all) on the first stage; on the last the loss's
// statistics ((P + 1) x N) and the head's input gradient (N x C); with
// context parallelism the embedding's sum is two, one per chunk.
// Under train.deterministic every sum is a tree_sum (log2(tp) send_recv
// calls, each counted both ways) per canonical chunk the rank runs, and the
// norm is the exact sum's digits (ExactSquares::kFloats floats).
GroupTraffic tp_traffic(const RankShape& r) {
  GroupTraffic t;
  if (r.tp.size == 1) return t;
  const TpCounts k = tp_counts(r);
  uint64_t calls = 1;
  t.bytes = k.det ? ExactSquares::kFloats * sizeof(float) : sizeof(double);
  if (r.tp.shape().vocab) vocab_traffic(r, k, calls, t.bytes);
  if (r.step.sequence_parallel) {
    sequence_parallel_traffic(r, k, calls, t.bytes);
  } else {
    layer_traffic(r, k, calls, t.bytes);
  }
  t.calls = calls;
  return t;
}

// The allreduce calls of a bucketed gradient sum (GradientSync): the backward
// reports each finished suffix from the start of the head, of each layer (of
// each private run) and of the embeddings (model.cpp's done_from); a bucket
// goes once it holds bucket floats, and the rest at the end.
uint64_t bucket_calls(const RankShape& r, size_t n, size_t bucket) {
  std::vector<size_t> ready;
  auto unit_offset = [&](int id) {
    for (const ParamUnit& u : r.units) {
      if (u.id == id) return u.offset;
    }
    throw std::logic_error(fmt::format("plan: no parameter unit {}", id));
  };
  if (r.layers.head) ready.push_back(unit_offset(r.cfg.L + 1));
  for (int l = r.layers.last - 1; l >= r.layers.first; --l) {
    if (!r.tp.is_private(l) || r.tp.run_start(l) == l) ready.push_back(unit_offset(1 + l));
  }
  if (r.layers.embed) ready.push_back(0);
  uint64_t calls = 0;
  size_t pending_end = n;
  for (size_t offset : ready) {
    if (pending_end - offset >= bucket) {
      ++calls;
      pending_end = offset;
    }
  }
  return calls + (pending_end > 0 ? 1 : 0);
}

// train.deterministic's data-parallel step (train_step.h): per round of the
// recursive doubling a send_recv of the loss (a double), counted both ways;
// without ZeRO one of the whole gradient too. With ZeRO the gradient's
// canonical_reduce_scatter instead (one send_recv per block a rank keeps at
// each level: this rank's blocks), over the flat buffer's contiguous chunks
// (then the all-gather of the padded parameters) or over every unit's pieces
// (ZeRO-3: and an all-gather per unit in each chunk's forward and backward);
// and the exact norm's digits (ExactSquares::kFloats floats).
GroupTraffic deterministic_dp_traffic(const RankShape& r, const RankMemory& mem) {
  GroupTraffic t;
  uint64_t calls = 0;
  const int N = r.dp, me = r.dp_rank;
  for (int bit = 1; bit < N; bit <<= 1) {
    ++calls;
    t.bytes += 2 * sizeof(double);
    if (r.zero().zero_stage == 0) {
      ++calls;
      t.bytes += 2 * mem.count * sizeof(float);
    }
  }
  t.calls = calls;
  if (r.zero().zero_stage == 0) return t;
  // A buffer of `count` floats in blocks of `chunk` (the last cut short).
  auto halving = [&](size_t count, size_t chunk) {
    auto len = [&](int p) {
      const size_t lo = std::min(static_cast<size_t>(p) * chunk, count);
      return std::min(lo + chunk, count) - lo;
    };
    for (int bit = 1; bit < N; bit <<= 1) {
      for (int p = me & (bit - 1); p < N; p += bit) {
        if ((p & bit) != (me & bit)) continue;
        ++calls;
        t.bytes += (len(p ^ bit) + len(p)) * sizeof(float);
      }
    }
  };
  if (r.zero().contiguous) {
    halving(mem.count, contiguous_shard(mem.count, mem.grads / sizeof(float), N, me).chunk);
    ++calls;  // the parameters' all-gather
    t.bytes += mem.grads;
  } else {
    const uint64_t local = static_cast<uint64_t>(r.step.chunks / N);
    for (const UnitShards::Piece& p : r.shards.pieces) {
      halving(p.unit.count, p.chunk);
      calls += 2 * local;
      t.bytes += 2 * local * p.chunk * static_cast<uint64_t>(N) * sizeof(float);
    }
  }
  ++calls;
  t.bytes += ExactSquares::kFloats * sizeof(float);
  t.calls = calls;
  return t;
}

// The data-parallel group's step: the loss (one double); the gradient's
// allreduce (whole or in buckets) without ZeRO; with contiguous shards a
// reduce-scatter and an all-gather of the padded buffer; with unit shards a
// reduce-scatter per unit (ZeRO-2: and an all-gather per unit after the
// update; ZeRO-3: two all-gathers per unit, forward and backward), each of
// N x chunk floats; with either, the shards' squared gradient norm (a double).
GroupTraffic dp_traffic(const RankShape& r, const RankMemory& mem) {
  GroupTraffic t;
  if (r.dp == 1) return t;
  if (r.step.deterministic()) return deterministic_dp_traffic(r, mem);
  uint64_t calls = 1;
  t.bytes = sizeof(double);
  if (r.zero().zero_stage == 0) {
    const size_t bucket = static_cast<size_t>(r.c.train.grad_bucket_mb * (1 << 20) / sizeof(float));
    // Under a schedule the buckets go during the stage's last whole backward (none with zb-h1's split one, nor
    // with several chunks a rank: all at the end).
    calls += bucket == 0 || r.step.split_backward || r.layers.chunks() > 1 ? 1 : bucket_calls(r, mem.count, bucket);
    t.bytes += mem.count * sizeof(float);
  } else if (r.zero().contiguous) {
    calls += 3;
    t.bytes += 2 * mem.grads + sizeof(double);
  } else {
    uint64_t floats = 0;
    for (const UnitShards::Piece& p : r.shards.pieces) floats += p.chunk * static_cast<uint64_t>(r.dp);
    const uint64_t passes = r.zero().zero_stage == 3 ? 3 : 2;
    calls += passes * r.shards.pieces.size() + 1;
    t.bytes += passes * floats * sizeof(float) + sizeof(double);
  }
  t.calls = calls;
  return t;
}

// The pipeline group's step on stage s of p: per microbatch an activation
// received from stage s - 1 and its gradient sent back, an activation sent
// to stage s + 1 and its gradient received (rows / m x seq_len x n_embd
// floats each); the loss and the squared gradient norm (two doubles; the
// norm's digits under train.deterministic). With virtual stages the same
// for each of the rank's chunks, but where the neighbouring stage is on
// this rank (ZB-V's turn: a copy, no message).
GroupTraffic pp_traffic(const RankShape& r) {
  GroupTraffic t;
  const int p = r.c.parallel.pp;
  if (p == 1) return t;
  const uint64_t m = static_cast<uint64_t>(r.c.parallel.microbatches);
  // A microbatch's activations or their gradient; with sequence parallelism this rank's rows of them.
  const uint64_t msg = static_cast<uint64_t>(r.rows) / m * static_cast<uint64_t>(r.seq_len) *
                       static_cast<uint64_t>(r.cfg.C) * sizeof(float) /
                       static_cast<uint64_t>(r.step.sequence_parallel ? r.tp.size : 1);
  uint64_t messages = 0;
  const StageSplit& sp = *r.split;
  const int S = static_cast<int>(sp.counts.size());
  for (const int s : sp.stages_of(r.stage)) {
    if (s > 0 && sp.rank_of(s - 1) != r.stage) messages += 2 * m;
    if (s + 1 < S && sp.rank_of(s + 1) != r.stage) messages += 2 * m;
  }
  t.calls = messages + 2;
  // train.deterministic's norm is an exact sum: its digits (ExactSquares::kFloats floats), not a double.
  t.bytes = messages * msg + sizeof(double) +
            (r.step.deterministic() ? ExactSquares::kFloats * sizeof(float) : sizeof(double));
  return t;
}

// The context-parallel ring's step (model/context_parallel.h): per layer and
// microbatch, the forward passes the packed keys and values on cp - 1 times
// and the backward cp - 1 times again and their gradients cp times (the last
// home to their owner); recomputation runs the forward's ring again for each
// layer but the stage's last. Each shift is a non-blocking send and a
// receive of one block: the arena's rows x chunk length x 2 KVH HS / tp
// floats. (Per rank and layer the forward sends 2 N h_kv (cp - 1) / cp of a
// step's N tokens: the formula, here counted both ways.)
// Under train.deterministic (train.sequence_pieces: docs/determinism.md,
// "Sequence pieces") there is no ring. Per canonical chunk the rank runs:
// per layer, the forward's all-gather of the arena's qkv (counted as the
// whole gathered buffer, cp blocks), and again in the backward, with the
// key and value gradients' tree reduce-scatter (log2(cp) send_recv calls,
// level k sending and receiving 1/2^k of the cp blocks); recomputation's
// forward gathers again for each layer but the last; the loss's tree sum in
// double (log2(cp) send_recv calls of one double each way); and at the
// backward's end the gradient's tree sum (log2(cp) send_recv calls of the
// rank's parameters each way), and a tied head's own tree (V x C) apart.
GroupTraffic cp_pieces_traffic(const RankShape& r) {
  GroupTraffic t;
  const uint64_t cp = static_cast<uint64_t>(r.c.parallel.cp), f = sizeof(float);
  uint64_t rounds = 0;
  for (uint64_t bit = 1; bit < cp; bit <<= 1) ++rounds;
  const uint64_t m = static_cast<uint64_t>(r.step.chunks / r.dp);
  const uint64_t arena = static_cast<uint64_t>(r.step.arena_rows) * static_cast<uint64_t>(r.seq_len);
  const uint64_t tp = static_cast<uint64_t>(r.tp.size);
  const uint64_t W = static_cast<uint64_t>(r.cfg.qkv_width()) / tp;
  const uint64_t KV = static_cast<uint64_t>(r.cfg.qkv_width() - r.cfg.C) / tp;
  const uint64_t layers = static_cast<uint64_t>(r.layers.last - r.layers.first);
  const uint64_t again = r.step.recompute_full ? layers - 1 : 0;
  uint64_t scatter = 0;  // one tree reduce-scatter of the cp blocks of key and value gradients
  for (uint64_t k = 1; k <= rounds; ++k) scatter += 2 * ((cp * arena * KV) >> k) * f;
  const uint64_t params = param_count(r.cfg, r.tp.shape(), r.layers);
  const bool tied_head = r.cfg.tie_embeddings && r.layers.head;
  const uint64_t head = tied_head ? static_cast<uint64_t>(r.cfg.V) * static_cast<uint64_t>(r.cfg.C) : 0;
  t.calls = m * ((2 * layers + again) + layers * rounds + rounds * (tied_head ? 3 : 2));
  t.bytes = m * ((2 * layers + again) * cp * arena * W * f + layers * scatter + rounds * 2 * sizeof(double) +
                 rounds * 2 * (params + head) * f);
  return t;
}

GroupTraffic cp_traffic(const RankShape& r) {
  GroupTraffic t;
  const uint64_t cp = static_cast<uint64_t>(r.c.parallel.cp);
  if (cp == 1) return t;
  if (r.step.deterministic()) return cp_pieces_traffic(r);
  const uint64_t m = static_cast<uint64_t>(r.step.microbatches);
  const uint64_t kv = static_cast<uint64_t>(r.cfg.qkv_width() - r.cfg.C) / static_cast<uint64_t>(r.tp.size);
  const uint64_t block = static_cast<uint64_t>(r.step.arena_rows) * static_cast<uint64_t>(r.seq_len) * kv *
                         sizeof(float);
  const uint64_t layers = static_cast<uint64_t>(r.layers.last - r.layers.first);
  const uint64_t again = r.step.recompute_full ? layers - 1 : 0;
  const uint64_t shifts = m * (layers * (3 * cp - 2) + again * (cp - 1));
  t.calls = 2 * shifts;
  t.bytes = 2 * shifts * block;
  return t;
}

// What the rank holds, from the ranges the writer and the reader take
// (train/formats/sharded_checkpoint.h), for the format to count
// (checkpoint_bytes, train/formats/model_source.h).
RankHolding rank_holding(const RankShape& r, int world_rank) {
  const size_t n = param_count(r.cfg, r.tp.shape(), r.layers);
  const bool replicated = r.zero().zero_stage == 0;  // ZeRO 0: the moments are the whole part (as MomentShard::held)
  const std::vector<ShardRange> moments =
      replicated ? std::vector<ShardRange>{{0, n, 0}} : nonempty(moment_ranges(r, n));
  RankHolding h;
  h.root = world_rank == 0;
  h.written = {r.tp.shape(), r.tp.rank, r.layers, owned_ranges(n, r.dp, r.dp_rank, replicated, moments)};
  h.moments_read = moments;
  h.params_read = r.zero().residency == Residency::kNone ? moments : std::vector<ShardRange>{{0, n, 0}};
  return h;
}

}  // namespace

std::vector<int> planned_ranks(int ranks, int replica) {
  std::vector<int> shown;
  if (ranks <= kPlanRankRecords) {
    for (int k = 0; k < ranks; ++k) shown.push_back(k);
    return shown;
  }
  const int each = std::min(replica, kPlanRankRecords / 2);
  for (int k = 0; k < each; ++k) shown.push_back(k);
  for (int k = 0; k < each; ++k) {  // the last replica's (the first's again with one replica: not repeated)
    if (ranks - replica + k >= each) shown.push_back(ranks - replica + k);
  }
  return shown;
}

namespace {
// The step-time model's prediction for the plan's ranks (step_time.h). The machine file times the CPU backend's
// kernels: the CUDA stages' steps are not predicted yet.
std::optional<StepTime> plan_time(const RunLayout& run, const Plan& p,
                                  const std::vector<std::vector<ChunkAction>>& lists, const MachineModel& machine) {
  if (run.program != "serial" && run.program != "mpi") return std::nullopt;
  const auto messages = [](const GroupTraffic& g) { return Messages{g.calls.value_or(0), g.bytes}; };
  std::vector<RankWork> work;
  for (const RankPlan& r : p.rank) {
    work.push_back(RankWork{r.rank, r.stage, r.mem.count, r.mem.moments / (2 * sizeof(float)), messages(r.tp),
                            messages(r.dp), messages(r.pp), messages(r.cp)});
  }
  return predict_step(run, work, lists, p.flops_per_step, machine);
}
}  // namespace

namespace {
// The plan's fields of the whole layout: its grid, schedule, ZeRO, sizes and bubble.
Plan plan_header(const RunLayout& run, const std::string& program, int ranks) {
  const RunConfig& c = run.config;
  const Gpt2Config& cfg = c.model;
  Plan p;
  p.program = program;
  p.ranks = ranks;
  p.tp = run.tp;
  p.pp = run.pp;
  p.cp = run.cp;
  p.rows = run.rows;
  p.dp = run.dp;
  p.microbatches = c.parallel.microbatches;
  p.schedule = to_string(c.parallel.schedule);
  p.virtual_stages = c.parallel.virtual_stages;
  for (const std::string& t : c.parallel.pass_times) p.pass_times += (p.pass_times.empty() ? "" : ",") + t;
  p.checkpoint_format = to_string(c.train.checkpoint_format);
  p.zero = run.step.zero.zero_stage;
  p.zero_contiguous = run.step.zero.contiguous;
  p.vocab = cfg.V;
  p.params_total = static_cast<int64_t>(param_count(cfg));
  p.flops_per_step = training_flops(cfg, c.train.batch_size, c.train.seq_len).total();
  const int v = c.parallel.virtual_stages;
  const PassTimes& passes = run.stage_split.passes;
  p.bubble = p.pp > 1 ? schedule_bubble(c.parallel.schedule, p.pp, p.microbatches, v, passes) : 0.0;
  if (p.pp > 1) {
    p.bubble_formula = schedule_bubble_formula(c.parallel.schedule);
    p.peak_in_flight = schedule_peak_in_flight(c.parallel.schedule, p.pp, p.microbatches, v, passes);
  }
  return p;
}
}  // namespace

Plan make_plan(const RunConfig& given, int ranks, const std::string& program, const MachineModel* machine) {
  if (ranks > kMaxRanks) throw std::invalid_argument(fmt::format("--ranks: at most {}, got {}", kMaxRanks, ranks));
  const RunLayout run = resolve_run(given, ranks, program);
  const RunConfig& c = run.config;
  const Gpt2Config& cfg = c.model;
  cfg.validate();
  Plan p = plan_header(run, program, ranks);
  const int v = c.parallel.virtual_stages;
  const PassTimes& passes = run.stage_split.passes;
  // A rank's parameter units depend on its place in a replica only: worked out once per (tp rank, stage).
  std::map<int, std::vector<ParamUnit>> units_of;
  const StepSpec& step = run.step;
  std::vector<std::vector<ChunkAction>> lists;  // every pipeline rank's actions, made once
  if (step.pipelined()) lists = schedule_lists(step.schedule, p.pp, v, step.microbatches, passes);
  for (const int k : planned_ranks(ranks, p.tp * p.cp * p.pp)) {
    const GridCoords at = run.at(k);
    // The gradient group: dp x cp ranks, this one's place in it (parallel/process_grid.h).
    // Under train.deterministic the step's tree runs over the replicas alone (StepSpec::over_replicas).
    const bool replicas = step.over_replicas;
    RankShape r{c,
                run.shape.seq_len,
                cfg,
                TpPlace{p.tp, at.tp_rank, c.parallel.blocks(), nullptr, c.parallel.vocab_parallel},
                run.stage_split.held(at.stage),
                replicas ? p.dp : p.dp * run.cp,
                replicas ? at.dp_rank : at.dp_rank * run.cp + at.cp_rank,
                at.stage,
                run.step_rows(),
                {},
                {},
                step,
                &run.stage_split,
                &lists};
    r.tp.validate(cfg);
    r.layers.last = r.layers.end(cfg.L);
    std::vector<ParamUnit>& units = units_of[at.tp_rank * p.pp + at.stage];
    if (units.empty()) {
      ParamTensors scratch;
      units = param_units(cfg, layout(cfg, scratch, r.tp.shape(), r.layers));
    }
    r.units = units;
    if (r.sharded()) r.shards = UnitShards::of(r.units, r.dp, r.dp_rank);
    RankPlan rp;
    rp.rank = k;
    rp.tp_rank = at.tp_rank;
    rp.stage = at.stage;
    rp.dp_rank = at.dp_rank;
    rp.first_layer = r.layers.first;
    rp.end_layer = r.layers.last;
    rp.mem = plan_memory(r);
    rp.tp = tp_traffic(r);
    rp.dp = dp_traffic(r, rp.mem);
    rp.pp = pp_traffic(r);
    rp.cp = cp_traffic(r);
    rp.checkpoint = checkpoint_bytes(r.c.train.checkpoint_format, r.cfg, rank_holding(r, k));
    p.rank.push_back(rp);
  }
  p.ranks_omitted = ranks - static_cast<int>(p.rank.size());
  if (machine != nullptr) p.time = plan_time(run, p, lists, *machine);
  return p;
}

std::string variant_label(const RunConfig& c) {
  RunConfig given = c, plain;
  const Fields a = run_fields(given), b = run_fields(plain);
  std::string label;
  for (const std::string& key : Gpt2Config::variant_keys()) {
    const std::string v = a.find("model." + key)->get();
    if (v == b.find("model." + key)->get()) continue;
    label += fmt::format("{}{}={}", label.empty() ? "" : " ", key, v);
  }
  return label;
}

Plan plan_run(const RunConfig& c, int ranks, const std::string& program, const MachineModel* machine) {
  validate_with_split(c);
  const std::unique_ptr<Communicator> local = make_local_communicator();
  const Corpus corpus = load_corpus(c.data, nullptr, *local);
  RunConfig resolved = c;
  resolved.model = resolve_vocab(c.model, corpus.tok.size());
  Plan p = make_plan(resolved, ranks, program, machine);
  p.variant = variant_label(c);
  p.corpus = c.data.corpus;
  p.tokenizer = to_string(c.data.tokenizer);
  p.corpus_tokens = corpus.size();
  return p;
}

namespace {
Json traffic_json(const GroupTraffic& t) {
  return Json{{"calls", t.calls ? Json(*t.calls) : Json(nullptr)}, {"bytes", t.bytes}};
}
}  // namespace

Json plan_json(const Plan& p) {
  Json ranks = Json::array();
  for (const RankPlan& r : p.rank) {
    const RankMemory& m = r.mem;
    ranks.push_back(Json{
        {"rank", r.rank}, {"tp_rank", r.tp_rank}, {"stage", r.stage}, {"dp_rank", r.dp_rank},
        {"layers", Json::array({r.first_layer, r.end_layer})},
        {"memory", Json{{"params", m.count}, {"params_bytes", m.params}, {"grads_bytes", m.grads},
                        {"moments_bytes", m.moments}, {"arena_bytes", m.arena}, {"arena_embed_bytes", m.arena_embed},
                        {"arena_layers_bytes", m.arena_layers}, {"arena_head_bytes", m.arena_head},
                        {"arena_scratch_bytes", m.arena_scratch}, {"arenas", m.arenas},
                        {"activations_bytes", m.activations()}, {"gathered_bytes", m.gathered},
                        {"comm_buffer_bytes", m.comm_buffers}, {"model_state_bytes", m.model_state()},
                        {"formula_bytes", m.formula}}},
        {"comm", Json{{"tp", traffic_json(r.tp)}, {"dp", traffic_json(r.dp)}, {"pp", traffic_json(r.pp)},
                      {"cp", traffic_json(r.cp)}}},
        {"checkpoint", Json{{"format", p.checkpoint_format}, {"write_bytes", r.checkpoint.write},
                            {"read_bytes", r.checkpoint.read}}}});
  }
  Json out{{"schema", "gpt2-plan/1"},
           {"stage", p.program},
           {"ranks", p.ranks},
           {"ok", true},
           {"layout", Json{{"dp", p.dp},
                           {"tp", p.tp},
                           {"pp", p.pp},
                           {"cp", p.cp},
                           {"microbatches", p.microbatches},
                           {"schedule", p.schedule},
                           {"virtual_stages", p.virtual_stages},
                           {"pass_times", p.pass_times},
                           {"zero", p.zero},
                           {"zero_contiguous", p.zero_contiguous}}},
           {"variant", p.variant},
           {"data", Json{{"corpus", p.corpus}, {"tokenizer", p.tokenizer}, {"tokens", p.corpus_tokens}}},
           {"rows_per_replica", p.rows},
           {"vocab", p.vocab},
           {"params_total", p.params_total},
           {"flops_per_step", p.flops_per_step},
           {"bubble", p.bubble},
           {"per_rank", ranks}};
  if (p.pp > 1) {
    out["bubble_formula"] = p.bubble_formula;
    out["peak_in_flight"] = p.peak_in_flight;
  }
  if (p.ranks_omitted > 0) out["per_rank_omitted"] = p.ranks_omitted;
  if (p.time) out["time"] = step_time_json(*p.time);
  return out;
}

Json refusal_json(const std::string& program, int ranks, const std::string& error) {
  return Json{{"schema", "gpt2-plan/1"}, {"stage", program}, {"ranks", ranks}, {"ok", false}, {"error", error}};
}

}  // namespace gpt2
