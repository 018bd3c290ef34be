#include "train/resolve/step_time.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "train/schedule/virtual_schedule.h"

namespace gpt2 {

namespace {

// Products and attention scale with their FLOPs, the other kernels with their bytes.
bool scales_by_flops(const std::string& op) { return op.rfind("matmul", 0) == 0 || op.rfind("attention", 0) == 0; }

double measure_of(const std::string& op, const ops::OpShape& s) {
  const std::string base = op.substr(0, op.find('.'));
  const ops::OpCost c = ops::op_cost(base, s);
  return scales_by_flops(base) ? c.flop : c.bytes;
}

// Seconds of one call of an op at a shape on this machine at `threads`.
// Between two measured calls of the same op (by count: FLOPs or bytes) the
// time follows the power law through them (a straight line in log-log, so
// the small calls' fixed costs carry over in proportion); beyond the
// measured range it scales with the count from the nearest.
class OpClock {
 public:
  OpClock(const MachineModel& m, int threads, bool bf16) : m_(m), threads_(threads), bf16_(bf16) {}

  double operator()(const std::string& op, const ops::OpShape& s) const {
    const double want = measure_of(op, s);
    if (want <= 0) return 0;
    std::vector<const KernelTiming*> list;
    if (bf16_) list = m_.timings(op + ".bf16", threads_);
    if (list.empty()) list = m_.timings(op, threads_);
    if (list.empty()) {
      throw std::invalid_argument(
          fmt::format("machine '{}' has no timing of {} (harness calibrate measures every "
                      "kernel of the step)",
                      m_.name, op));
    }
    double lo_c = 0, lo_t = 0, hi_c = std::numeric_limits<double>::infinity(), hi_t = 0;
    for (const KernelTiming* k : list) {
      const double have = measure_of(op, k->shape);
      if (!(have > 0) || !(k->seconds > 0)) continue;
      if (have <= want && have > lo_c) {
        lo_c = have;
        lo_t = k->seconds;
      }
      if (have >= want && have < hi_c) {
        hi_c = have;
        hi_t = k->seconds;
      }
    }
    const bool lo = lo_c > 0, hi = std::isfinite(hi_c);
    if (!lo && !hi) throw std::invalid_argument(fmt::format("machine '{}': no usable timing of {}", m_.name, op));
    if (lo && hi && hi_c > lo_c) {
      const double k = std::log(hi_t / lo_t) / std::log(hi_c / lo_c);
      return lo_t * std::pow(want / lo_c, k);
    }
    return lo ? lo_t * want / lo_c : hi_t * want / hi_c;
  }

 private:
  const MachineModel& m_;
  int threads_;
  bool bf16_;
};

// One pass of a microbatch through a piece of the model: the forward, the
// input gradients (B) and the weight gradients (W).
struct Passes {
  double forward = 0, input = 0, weight = 0;
  Passes& operator+=(const Passes& o) {
    forward += o.forward;
    input += o.input;
    weight += o.weight;
    return *this;
  }
  Passes times(double k) const { return {forward * k, input * k, weight * k}; }
  double total() const { return forward + input + weight; }
};

// A product's forward, and its backward split as the engine's zb-h1 splits it: the weight gradient a product of
// the forward's size, the input gradient the rest.
Passes product(const OpClock& t, const ops::OpShape& s) {
  const double f = t("matmul_forward", s), bw = t("matmul_backward", s);
  const double w = std::min(f, bw);
  return {f, bw - w, w};
}

Passes both(const OpClock& t, const std::string& op, const ops::OpShape& s) {
  return {t(op + "_forward", s), t(op + "_backward", s), 0};
}

struct PieceTimes {
  Passes layer, embed, head;
};

// A microbatch of `rows` rows of T positions through one layer, the embedding and the head, on a rank of
// tensor-parallel group `tp` (heads, the MLP's width and, with the vocabulary cut, the head's rows divided).
PieceTimes piece_times(const OpClock& t, const Gpt2Config& m, int rows, int T, int tp, bool vocab_cut) {
  const auto shape = [&](int64_t c, int64_t oc, int64_t nh, int64_t kvh) {
    ops::OpShape s{rows, T, c, nh, m.V, oc, 0};
    s.KVH = kvh;
    return s;
  };
  const int64_t C = m.C, NH = std::max(1, m.NH / tp), KVH = std::max(1, m.kv_heads() / tp);
  const int64_t H = m.mlp_width() / tp, HS = m.head_size();
  const std::string norm = m.rms() ? "rmsnorm" : "layernorm";
  const std::string act = m.swiglu() ? std::string("swiglu") : to_string(m.activation_kind());
  PieceTimes p;
  Passes& l = p.layer;
  l += both(t, norm, shape(C, 0, NH, KVH)).times(2);
  l += product(t, shape(C, (NH + 2 * KVH) * HS, NH, KVH));
  l += both(t, "attention", shape(NH * HS, 0, NH, KVH));
  l += product(t, shape(NH * HS, C, NH, KVH));
  l += product(t, shape(C, m.fc_width() / tp, NH, KVH));
  l += both(t, act, shape(H / 4, 0, NH, KVH));
  l += product(t, shape(H, C, NH, KVH));
  l.forward += 2 * t("residual_forward", shape(C, 0, NH, KVH));
  if (m.rope()) l += both(t, "rope", shape(NH * HS, 0, NH, KVH));
  p.embed = both(t, "encoder", shape(C, 0, NH, KVH));
  const int64_t V = vocab_cut ? (m.V + tp - 1) / tp : m.V;
  ops::OpShape head = shape(C, V, NH, KVH);
  head.V = V;
  p.head = both(t, norm, shape(C, 0, NH, KVH));
  p.head += product(t, head);
  p.head += both(t, "crossentropy", head);
  return p;
}

// A group's messages: alpha per call and the bytes times the collective's factor over beta.
double group_seconds(const Messages& g, double factor, const LinkRates& link) {
  if (g.bytes == 0 && g.calls == 0) return 0;
  if (!(link.bytes_per_s > 0)) throw std::invalid_argument("machine: the node's link has no bandwidth");
  return static_cast<double>(g.calls) * link.latency_s + static_cast<double>(g.bytes) * factor / link.bytes_per_s;
}

double ring(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0.0; }
double half_ring(int n) { return n > 1 ? static_cast<double>(n - 1) / n : 0.0; }

// Each pipeline stage's passes of one microbatch (the whole model on one stage without a pipeline).
std::vector<Passes> stage_passes(const RunLayout& run, const PieceTimes& piece) {
  const int L = run.config.model.L;
  std::vector<Passes> out(static_cast<size_t>(run.pp));
  for (int s = 0; s < run.pp; ++s) {
    const StageLayers held = run.stage_split.held(s);
    int layers = 0;
    for (int k = 0; k < held.chunks(); ++k) {
      const StageLayers ch = held.chunk(k, L);
      layers += ch.end(L) - ch.first;
    }
    Passes p = piece.layer.times(layers);
    if (held.embed) p += piece.embed;
    if (held.head) p += piece.head;
    if (run.step.recompute_full) p.input += p.forward;  // the forward again before the backward
    out[static_cast<size_t>(s)] = p;
  }
  return out;
}

// One rank's kernels in a step: its stage's passes over the step's arenas, Adam over the parameters it updates
// and the gradient's norm, and train.deterministic's tree adds over the whole gradient.
double rank_compute(const RunLayout& run, const RankWork& r, const Passes& mine, int arenas, const OpClock& clock) {
  ops::OpShape flat{};
  flat.P = static_cast<int64_t>(r.updated_params);
  double compute = arenas * mine.total() + clock("adam_update", flat) + clock("sum_squares", flat);
  if (run.step.deterministic() && arenas > 1) {
    const ops::OpShape whole{1, 1, static_cast<int64_t>(r.params)};
    compute += (arenas - 1) * clock("residual_forward", whole);
  }
  return compute;
}

// A pipeline's step: the engine's action lists under the slowest stage's pass times per chunk, each forward and
// backward carrying its share of the pipeline's messages, then the optimizer and the other groups' messages.
// Sets the step and the bubble.
void pipeline_step(const RunLayout& run, const std::vector<RankWork>& ranks,
                   const std::vector<std::vector<ChunkAction>>& lists, const std::vector<Passes>& passes,
                   const std::vector<double>& busy, const std::vector<double>& comm, const LinkRates& link,
                   StepTime& out) {
  const int v = std::max(1, run.config.parallel.virtual_stages), mb = run.step.microbatches;
  Passes worst;
  double pp_msgs = 0, after = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const Passes& p = passes[static_cast<size_t>(ranks[i].stage)];
    worst.forward = std::max(worst.forward, p.forward / v);
    worst.input = std::max(worst.input, p.input / v);
    worst.weight = std::max(worst.weight, p.weight / v);
    const double pp = group_seconds(ranks[i].pp, 1.0, link);
    pp_msgs = std::max(pp_msgs, pp);
    after = std::max(after, busy[i] - mb * p.total() + comm[i] - pp);
  }
  const double per_message = pp_msgs / (2.0 * mb * v);
  const PassTimes t{worst.forward + per_message, worst.input + per_message, worst.weight};
  const ScheduleRun sim = simulate_schedule(lists, run.pp * v, stage_placement(run.step.schedule), run.pp, t);
  if (!sim.complete) throw std::logic_error("predict_step: the schedule's lists do not complete: " + sim.stuck);
  out.step_s = sim.makespan + after;
  double b = 0;
  for (double x : sim.bubble) b += x;
  out.bubble = sim.bubble.empty() ? 0 : b / static_cast<double>(sim.bubble.size());
  out.notes.push_back("pipeline: every stage runs at the slowest stage's pass times");
}

void add_notes(const RunLayout& run, bool bf16, StepTime& out) {
  if (bf16) out.notes.push_back("bf16: each kernel's bf16 timing where the machine has one, else its fp32 timing");
  const std::vector<BlockType> blocks = run.config.parallel.blocks();
  if (run.tp > 1 && std::any_of(blocks.begin(), blocks.end(), [](BlockType b) { return b != BlockType::kTp; })) {
    out.notes.push_back("tensor parallelism: every block timed as a tp block");
  }
  if (run.step.deterministic()) {
    out.notes.push_back(
        "train.deterministic: the default backend's kernels (not its canonical tiles), no leaf "
        "zeroing, the norm as sum_squares");
  }
  out.notes.push_back("communication: not overlapped with compute");
}

}  // namespace

StepTime predict_step(const RunLayout& run, const std::vector<RankWork>& ranks,
                      const std::vector<std::vector<ChunkAction>>& lists, double flops_per_step,
                      const MachineModel& machine) {
  const auto& train = run.config.train;
  StepTime out;
  out.machine = machine.name;
  out.threads = train.threads > 0 ? train.threads : std::max(1, machine.cores / std::max(1, run.ranks));
  const bool bf16 = train.precision == Precision::kBf16;
  const OpClock clock(machine, out.threads, bf16);
  const int rows = run.step.arena_rows;
  const PieceTimes piece =
      piece_times(clock, run.config.model, rows, run.shape.seq_len, run.tp, run.config.parallel.vocab_parallel);
  const std::vector<Passes> passes = stage_passes(run, piece);
  const int arenas = std::max(1, run.step_rows() / std::max(1, rows));  // a step's arenas (chunks, microbatches)
  const LinkRates& link = machine.node;
  const double dp_factor = run.step.deterministic()       ? 1.0
                           : run.step.zero.zero_stage > 0 ? half_ring(run.dp)
                                                          : ring(run.dp);
  std::vector<double> busy(ranks.size()), comm(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankWork& r = ranks[i];
    busy[i] = rank_compute(run, r, passes[static_cast<size_t>(r.stage)], arenas, clock);
    comm[i] = group_seconds(r.tp, ring(run.tp), link) + group_seconds(r.dp, dp_factor, link) +
              group_seconds(r.pp, 1.0, link) + group_seconds(r.cp, 1.0, link);
    out.step_s = std::max(out.step_s, busy[i] + comm[i]);
  }
  if (run.step.pipelined() && run.pp > 1) pipeline_step(run, ranks, lists, passes, busy, comm, link, out);
  for (size_t i = 0; i < ranks.size(); ++i) {
    out.ranks.push_back(
        RankTime{ranks[i].rank, ranks[i].stage, busy[i], comm[i], std::max(0.0, out.step_s - busy[i] - comm[i])});
  }
  out.tokens_per_s = out.step_s > 0 ? static_cast<double>(train.batch_size) * train.seq_len / out.step_s : 0;
  if (machine.peak_flops > 0 && out.step_s > 0)
    out.mfu = flops_per_step / (out.step_s * machine.peak_flops * run.ranks);
  add_notes(run, bf16, out);
  return out;
}

Json step_time_json(const StepTime& t) {
  Json ranks = Json::array();
  for (const RankTime& r : t.ranks) {
    ranks.push_back(Json{
        {"rank", r.rank}, {"stage", r.stage}, {"compute_s", r.compute_s}, {"comm_s", r.comm_s}, {"idle_s", r.idle_s}});
  }
  return Json{{"machine", t.machine}, {"threads", t.threads}, {"step_s", t.step_s}, {"tokens_per_s", t.tokens_per_s},
              {"mfu", t.mfu},         {"bubble", t.bubble},   {"ranks", ranks},     {"notes", t.notes}};
}

}  // namespace gpt2
