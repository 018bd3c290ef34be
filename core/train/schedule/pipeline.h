// Pipeline parallelism (DESIGN.md "Parallel layouts"): one step of one
// pipeline stage over m microbatches, as a schedule of actions chosen once.
//
//   gpipe   (Huang et al., 2019): all m forwards, then all m backwards; m
//           microbatches' activations in flight.
//   1f1b    (PipeDream-flush, Megatron-LM's forward_backward_pipelining_
//           without_interleaving): p - s - 1 warm-up forwards on stage s, a
//           steady phase of one forward and one backward, the cool-down
//           backwards; the same bubble as gpipe, at most p - s in flight.
//   zb-h1   (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): 1f1b
//           with each backward split into B (input gradients: what the stage
//           before waits for) and W (weight gradients: nobody waits for them);
//           stage s runs W of a microbatch s backwards later, so that W fills
//           the time 1f1b spent waiting. At most p microbatches in flight on
//           every stage (1f1b's first-stage peak); bubble (p-1)/(3m+p-1) of
//           the step against 1f1b's (p-1)/(m+p-1) when F, B and W take equal time.
//
//   interleaved-1f1b and zb-v (train/schedule/virtual_schedule.h): each rank holds
//           several chunks of layers (virtual stages, StageSplit) and its
//           list names the chunk of each action; a chunk hands its output to
//           the next virtual stage's rank, or copies it where that is the
//           same rank (ZB-V's turn).
//
// Messages: a stage receives its input before a forward and the gradient at
// its output before a backward (blocking receives, timed as waits), and
// sends with start_send (non-blocking), so only receives wait: every
// schedule here is a valid order of the same dependencies, so none can
// deadlock. Between two stages activations flow one way and gradients the
// other, each in microbatch order, which is the order the receiver takes them.
// With several chunks a rank each chunk's messages go on streams of their
// own (Communicator::start_send's), one per direction, so that two chunks'
// messages between the same two ranks cannot be taken for each other.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/comm.h"
#include "kernels/buffer.h"
#include "kernels/backend.h"
#include "model/activations.h"
#include "model/model.h"
#include "train/schedule/lists.h"
#include "train/schedule/preemption.h"
#include "train/config/run_config.h"
#include "train/schedule/stage_split.h"
#include "train/schedule/virtual_schedule.h"

namespace gpt2 {



// The share of a step each stage idles when F, B and W take equal time:
// (p-1)/(m+p-1) for gpipe and 1f1b, (p-1)/(3m+p-1) for zb-h1; and that
// formula as text, for the plan and the reports.
// With `v` chunks a rank: (p-1)/(vm+p-1) for interleaved-1f1b; zb-v's from
// its lists on the simulator (train/schedule/virtual_schedule.h) with the pass times
// `t` they were built for ((p-1)/(6m+p-1) for m >= 2p with equal passes).
double schedule_bubble(ScheduleKind kind, int stages, int m, int v = 1, const PassTimes& t = {});
std::string schedule_bubble_formula(ScheduleKind kind);
// The schedule's activation memory: the most microbatches any stage holds
// at once (max_in_flight over the stages), in arenas of one microbatch:
// m under gpipe, min(p, m) under 1f1b (its first stage) and zb-h1 (every stage).
// With v chunks a rank, in chunk arenas (each 1/v of a stage's layers): the
// most any rank holds at once over its chunks.
int schedule_peak_in_flight(ScheduleKind kind, int stages, int m, int v = 1, const PassTimes& t = {});

// One entry of a stage's timeline: an action, or a wait for a peer
// ("recv": inside a blocking receive; "send": waiting for a send to finish
// before its buffer is reused). Milliseconds from the start of the step.
struct TimelineEvent {
  const char* kind = "";  // "F", "BW", "B", "W", "recv", "send" (static strings: recording allocates nothing)
  int mb = 0;
  int stage = 0;  // the (virtual) stage it serves: the rank's own, or one of its chunks' (parallel.virtual_stages)
  double t0_ms = 0, t1_ms = 0;
};

// How a stage's microbatches' gradients and losses combine, chosen once
// (StepSpec: the deterministic steps take the tree):
//   kAccumulate  every backward adds into model.grads (the kernels' +=); the
//                losses are summed as they come
//   kTree        train.deterministic (docs/determinism.md): each microbatch's
//                backward (B and W together, or apart under zb-h1) writes
//                into a zeroed gradient buffer of its own
//                (Gpt2::bind_grads), and the microbatches' gradients,
//                complete in microbatch order under every schedule, are
//                added in the balanced binary tree as they complete (m a
//                power of two); the microbatches' losses likewise
//                (loss_sum). The stage's gradient is then the serial tree's
//                over the same chunks, bit for bit.
enum class MicrobatchSum { kAccumulate, kTree };
class MicrobatchCombiner;  // pipeline.cpp: one implementation per MicrobatchSum

// One pipeline stage of one data-parallel replica: runs a step's schedule
// over its microbatches on its own activation arenas (one per microbatch in
// flight, allocated once), combining the microbatches' gradients into
// model.grads as `sum` says.
class PipelineEngine {
 public:
  // `pp` is the pipeline group (stage = pp.rank(), the model holds that
  // rank's layers: `split`'s held(pp.rank()), one chunk or, under
  // interleaved-1f1b and zb-v, several); `m` microbatches a step, each
  // arena holding one as `microbatch` says (its rows; under sequence
  // parallelism a stage sends its cut of them; under context parallelism
  // its head and tail chunks: model/activations.h ArenaSpec).
  PipelineEngine(Backend& be, Gpt2& model, Communicator& pp, const StageSplit& split, ScheduleKind kind, int m,
                 const ArenaSpec& microbatch, MicrobatchSum sum = MicrobatchSum::kAccumulate);
  ~PipelineEngine();
  PipelineEngine(const PipelineEngine&) = delete;
  PipelineEngine& operator=(const PipelineEngine&) = delete;

  // Forward and backward of every microbatch of inputs / targets (rows x T,
  // host), each position's loss weighted by `dloss`. Returns the replica's
  // mean loss on the last stage, 0 on the others (sum it over the pipeline
  // group). Collective over the pipeline group and the model's tp group.
  // `hook` (data parallelism's bucketed gradient sum) is told of the
  // gradients the stage's last backward finishes: accumulated over every
  // microbatch, they are final then, so their allreduce overlaps that last
  // backward (a split backward, zb-h1, tells nothing: the sum follows).
  // `interrupt` is asked before each action at the schedule's stop_points
  // (every rank of every stage at the same ones); when it says stop, the
  // stage's sends are waited for (their receivers took them already) and
  // StepAbandoned is thrown.
  double step(const int32_t* inputs, const int32_t* targets, float dloss, GradReadyHook* hook = nullptr,
              StepInterrupt* interrupt = nullptr);
  // Forward only (validation): the mean loss on the last stage, 0 elsewhere.
  double forward_loss(const int32_t* inputs, const int32_t* targets);

  // Under kTree: the last step's (or forward_loss's) microbatch mean losses
  // added in the tree, on the last stage; 0 elsewhere (and under kAccumulate).
  double loss_sum() const;
  // Under kTree: the gradient-sized buffers it allocates for `arenas` arenas
  // (every chunk's) and m microbatches: one per microbatch between its
  // first backward and its fold, and the tree's partial sums before the last fold (log2(m)).
  static int tree_buffers(int arenas, int m);

  int stages() const { return stages_; }
  int stage() const { return stage_; }
  int chunks() const { return static_cast<int>(chunks_.size()); }  // this rank's (virtual stages)
  int microbatches() const { return m_; }
  int rows() const { return mb_rows_ * m_; }  // the replica's rows per step
  int seq_len() const { return T_; }
  ScheduleKind kind() const { return kind_; }
  const std::vector<ChunkAction>& schedule() const { return actions_; }
  // Arenas allocated (the schedule's max_in_flight, per chunk, added over
  // the chunks), the most in use at once in the last step (counted as they
  // are taken); the largest arena's bytes and kinds, and all arenas' bytes.
  int arenas() const { return arena_count_; }
  int peak_in_flight() const { return peak_; }
  size_t arena_bytes() const { return arena_bytes_; }
  const ArenaKinds& arena_kinds() const { return *largest_kinds_; }
  size_t activation_bytes() const { return activation_bytes_; }
  // The last step's timeline and its seconds waiting for peers.
  const std::vector<TimelineEvent>& timeline() const { return events_; }
  double wait_s() const { return wait_s_; }
  // When the last step began (the steady clock's nanoseconds): its timeline's zero.
  int64_t step_start_ns() const { return t0_ns_; }

 private:
  struct Slot {
    std::unique_ptr<ActivationArena> arena;
    std::vector<uint64_t> sends;  // tickets of sends from this arena's tensors
    int chunk = 0;                // the rank's chunk whose layers it holds
    int mb = -1;                  // the microbatch it holds; -1: free
    int last_mb = -1;             // the microbatch it held last (whose sends may be in flight)
  };
  Slot& take(int mb, int chunk);
  Slot& holding(int mb, int chunk);
  void release(Slot& slot);
  void wait_sends(Slot& slot);
  double forward(Slot& slot, const int32_t* inputs, const int32_t* targets);
  void backward(Slot& slot, const int32_t* inputs, const int32_t* targets, float dloss, BackwardPart part,
                GradReadyHook* hook = nullptr);
  void event(const char* kind, const Slot& slot, double t0, double t1);
  // A receive from `peer` into `into` on `stream`, timed as a wait for the slot's microbatch and chunk.
  void timed_recv(Tensor into, int peer, int stream, const Slot& slot);
  // The streams of chunk `chunk`'s messages: its outputs forwards, its input gradients backwards (one
  // chunk a rank: stream 0, as send and recv use).
  int forward_stream(int chunk) const { return split_.chunks() == 1 ? 0 : 1 + chunk; }
  int backward_stream(int chunk) const { return split_.chunks() == 1 ? 0 : 1 + split_.chunks() + chunk; }
  // Where microbatch `mb`'s tokens start in the replica's rows.
  size_t token_offset(int mb) const;
  double now_ms() const;

  Backend& be_;
  Gpt2& model_;
  Communicator& pp_;
  ScheduleKind kind_;
  StageSplit split_;
  int stages_, stage_, m_, mb_rows_, T_;
  std::vector<StageLayers> chunks_;    // this rank's, StageLayers::chunk of the model's
  std::vector<int> virtual_stage_;     // per chunk: its place among the split's stages
  std::vector<ChunkAction> actions_;
  std::vector<bool> stop_points_;      // where a step may stop (stop_points, chunk_stop_points)
  std::vector<Slot> arenas_;           // every chunk's
  size_t arena_bytes_ = 0, activation_bytes_ = 0;
  const ArenaKinds* largest_kinds_ = nullptr;
  int arena_count_ = 0, in_use_ = 0, peak_ = 0;
  std::vector<int> passes_left_;       // per microbatch: its chunks' backwards not yet complete this step
  std::vector<char> started_;          // per microbatch: a backward of it has begun this step
  std::vector<TimelineEvent> events_;
  double wait_s_ = 0;
  int64_t t0_ns_ = 0;
  std::unique_ptr<MicrobatchCombiner> sum_;  // MicrobatchSum's, made once
};

}  // namespace gpt2
