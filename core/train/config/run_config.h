// RunConfig: every setting of a training or generation run, as sections that
// each list their fields once (util/fields.h): model (model/config.h), data
// (model/data_config.h), train (below), optimizer (model/optim.h), generate
// (model/generate.h) and parallel (below). The trainer consumes it; the application
// layer reads it from YAML files and the command line (app/config_file.h).
// A new section (parallelism, say) is one member here, one line in
// run_fields() and its checks in validate().
//
// A field's key is "section.name" (train.steps): in YAML `name` under the
// mapping `section`, on the command line `--section.name V`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/tensor.h"
#include "model/config.h"
#include "model/data_config.h"
#include "model/generate.h"
#include "model/optim.h"
#include "model/tensor_parallel.h"
#include "util/fields.h"

namespace gpt2 {

// train.precision (DESIGN.md "Precision"): fp32, or bf16 mixed precision.
enum class Precision { kFp32, kBf16 };
// train.recompute: none, or full (each layer keeps its input only and is
// recomputed in the backward). Megatron's selective recomputation is what
// this engine's attention always does (it keeps only each row's log-sum-exp):
// 'attention' is refused, naming that.
enum class Recompute { kNone, kFull };
// parallel.schedule (train/schedule/pipeline.h): the pipeline's order of forwards and backwards.
enum class ScheduleKind { kGpipe, k1F1B, kZbH1, kInterleaved1F1B, kZbV };
// train.stop_within_step (train/schedule/preemption.h): whether a stop signal is also
// agreed inside a step, between its micro-steps, or only at its end.
enum class StopWithin { kAuto, kAlways, kNever };
// train.checkpoint_format: one file that world rank 0 writes from the
// gathered model (train/formats/checkpoint.h), or one file per rank of what it owns
// (train/formats/sharded_checkpoint.h).
enum class CheckpointFormat { kFile, kSharded };
std::string to_string(Precision p);
std::string to_string(Recompute r);
std::string to_string(ScheduleKind k);
std::string to_string(StopWithin w);
std::string to_string(CheckpointFormat f);
void from_string(const std::string& text, CheckpointFormat& f);  // throws std::invalid_argument naming train.checkpoint_format
void from_string(const std::string& text, StopWithin& w);  // throws std::invalid_argument naming train.stop_within_step
void from_string(const std::string& text, Precision& p);  // throws std::invalid_argument naming train.precision
void from_string(const std::string& text, Recompute& r);  // throws std::invalid_argument naming train.recompute
// "gpipe" | "1f1b" | "zb-h1" | "interleaved-1f1b" | "zb-v"; throws naming parallel.schedule
void from_string(const std::string& text, ScheduleKind& k);
// The schedules over virtual stages (several chunks of layers a rank: train/schedule/virtual_schedule.h).
inline bool is_virtual(ScheduleKind k) { return k == ScheduleKind::kInterleaved1F1B || k == ScheduleKind::kZbV; }
// The schedules that split each backward into B and W (zb-h1, zb-v).
inline bool splits_backward(ScheduleKind k) { return k == ScheduleKind::kZbH1 || k == ScheduleKind::kZbV; }

struct TrainConfig {
  int batch_size = 16;          // global batch rows
  int seq_len = 256;
  int steps = 50;               // optimizer steps (the original's "epochs")
  uint64_t seed = 1337;         // initial weights (Philox) and random windows
  int threads = 0;              // 0: every core
  int eval_every = 0;           // validation loss every N steps; 0: never
  int eval_batches = 4;
  int checkpoint_every = 0;     // training checkpoint every N steps; 0: at the end only
  bool save_checkpoint = true;  // false: write no checkpoint at all (benchmark runs)
  int keep_checkpoints = 2;     // complete training checkpoints kept in the run folder (the newest)
  bool tf32 = false;            // CUDA stages: cuBLAS may use TF32 tensor cores
  Precision precision = Precision::kFp32;  // bf16: matrix products with bf16 inputs, fp32 sums
  bool deterministic = false;   // the same bits at any thread count (docs/determinism.md)
  int sequence_pieces = 1;      // deterministic: each row's canonical pieces (kernels/sequence_pieces.h); 1: off
  double peak_gflops = 0.0;     // MFU denominator; 0: measure SGEMM at start-up
  double grad_bucket_mb = 0.0;  // data parallel: allreduce buckets overlapping backward; 0: one allreduce
  double max_loss = 0.0;        // divergence bound; 0: 3 x ln(vocab_size)
  bool layer_grad_norms = false;  // per-layer gradient norms in each step record (one pass over the gradients)
  Recompute recompute = Recompute::kNone;
  StopWithin stop_within_step = StopWithin::kAuto;
  CheckpointFormat checkpoint_format = CheckpointFormat::kFile;
  bool async_checkpoint = false;  // sharded saves: written by a background thread from a snapshot
  GemmChoice gemm = GemmChoice::kAuto;  // the CPU backend's fp32 products: auto | openblas | onednn
  std::string gemm_choices;             // auto's per-shape choices pinned from a run's record; "" = none
  std::string init_from;  // a fresh run's weights from a model file (train/formats/model_source.h); "" = model.init's
  bool bf16() const { return precision == Precision::kBf16; }
  bool recompute_full() const { return recompute == Recompute::kFull; }
  // The element type of the activations only a matrix product reads: bf16 with precision bf16.
  Dtype stored_dtype() const { return bf16() ? Dtype::bf16 : Dtype::f32; }

  // Throws std::invalid_argument naming the key.
  void validate() const;

  template <typename F>
  void visit_fields(F&& f) {
    f("batch_size", batch_size, "global batch rows per step");
    f("seq_len", seq_len, "tokens per row, <= model.block_size");
    f("steps", steps, "optimizer steps (the original's 'epochs': one global batch each)");
    f("seed", seed, "seed of the weights (Philox) and of random windows");
    f("init_from", init_from,
      "start from the weights of a model file instead of model.init's: our checkpoint (model or training: its "
      "weights only), llm.c's model file (fp32 or bf16) or a Hugging Face GPT-2 folder; the optimizer starts fresh, "
      "the model section must give the file's shapes (a mismatch names the tensor); ignored by --resume; \"\" = none "
      "(docs/formats.md)",
      "path");
    f("threads", threads, "CPU threads; 0 = every core; at most 4 x the cores (at least 64)");
    f("eval_every", eval_every, "validation loss every N steps; 0 = never");
    f("eval_batches", eval_batches, "batches per validation evaluation");
    visit_checkpoint_fields(f);
    f("tf32", tf32,
      "CUDA stages: let cuBLAS use TF32 tensor cores for the matrix products (faster, ~1e-3 relative error; "
      "changes results); ignored on the CPU");
    f("gemm", gemm,
      "the CPU stages' fp32 matrix products: auto (per product shape, the faster of OpenBLAS and oneDNN, timed once "
      "on this machine and kept in the cache folder's gemm_choices.json; OpenBLAS under train.deterministic, so "
      "the bits never depend on a timing) | openblas | onednn (every product); the run records each shape's "
      "provider (docs/kernels.md)");
    f("gemm_choices", gemm_choices,
      "with train.gemm auto: pin the per-shape choices an earlier run recorded (its metrics.jsonl, whose provenance "
      "holds gemm_choices, or a JSON file of that object), so that a rerun computes with the same libraries; "
      "shapes it does not name are chosen as usual; \"\" = none",
      "path");
    f("precision", precision,
      "fp32 (every value and sum in fp32) | bf16 (the matrix products round their inputs to bf16 and add in fp32, "
      "through oneDNN, and the activations only a product reads are stored in bf16; parameters, master weights, "
      "Adam moments, gradients, the residual stream, norms, softmax and loss stay fp32; on the CUDA stages the "
      "products alone; docs/precision.md)");
    f("deterministic", deterministic,
      "true: every sum in a canonical order, so the run gives serial's bits at any thread count and on every "
      "exact layout of the CPU stages: data parallelism (a power of two dividing the batch's canonical chunks), "
      "accumulation, ZeRO 1-3, pipelines, tensor parallelism, context parallelism (with train.sequence_pieces), "
      "and bf16 but not under tp; spd/parallel blocks, a "
      "vocabulary-parallel head, post-norm under tp and the CUDA stages are refused naming the constraint "
      "(docs/determinism.md); false: the fastest order");
    f("sequence_pieces", sequence_pieces,
      "with train.deterministic: cut every row of train.seq_len tokens into this many canonical pieces (a power of "
      "two dividing it) and define every sum over a batch's tokens as a tree over their pairs (pieces p and S-1-p), "
      "so that context parallelism gives serial's bits: parallel.cp N needs a multiple of 2 N. Changes the "
      "deterministic arithmetic (and its speed: products tiled inside pieces) for every layout alike; 1 = off "
      "(docs/determinism.md, \"Sequence pieces\")");
    f("peak_gflops", peak_gflops, "peak GFLOP/s for MFU; 0 = measure an SGEMM at start-up");
    f("grad_bucket_mb", grad_bucket_mb,
      "data parallel: gradient allreduce in buckets of this many MiB, started during backward; 0 = one allreduce "
      "after backward");
    f("stop_within_step", stop_within_step,
      "where a stop signal (SIGTERM, SIGINT, SIGUSR1) is agreed besides the step's end: auto | always | never. "
      "auto: between the micro-steps of a step where every rank runs the same ones (parallel.microbatches "
      "accumulation without stages, train.deterministic's chunks, ZeRO-2/3's units; no pipeline stages), once a step has taken "
      "more than 5 s; "
      "always: also in short steps, and between a pipeline's actions where no message is in flight (the stages "
      "then wait for each other there: measured 20-70% slower pipeline steps); never: at the step's end only");
    f("recompute", recompute,
      "activation recomputation: none | full. full: each layer keeps only its input and its forward is run "
      "again in the backward, one layer at a time (the same bits, less memory, about one more forward of "
      "compute). Megatron's selective recomputation (the attention core's scores and probabilities recomputed "
      "in the backward) is what this engine's attention always does, so there is no 'attention' setting");
    f("layer_grad_norms", layer_grad_norms,
      "record each layer's gradient 2-norm (and the embeddings' and head's) in every step record; one extra pass "
      "over the gradients; whole models (no tp, pp or ZeRO)");
    f("max_loss", max_loss,
      "stop the run (diverged) when the loss exceeds this or is not finite; 0 = 3 x ln(vocab_size), "
      "three times the loss of a uniform guess");
  }

 private:
  // The training checkpoints' fields (how a run saves: resolve/layout.h CheckpointSink), in visit_fields' order.
  template <typename F>
  void visit_checkpoint_fields(F& f) {
    f("checkpoint_every", checkpoint_every, "training checkpoint every N steps; 0 = at the end only");
    f("save_checkpoint", save_checkpoint, "write training checkpoints (false: none, e.g. for benchmarks)");
    f("keep_checkpoints", keep_checkpoints,
      "complete training checkpoints kept in the run folder's checkpoints/ (the newest N; an older one is removed "
      "only once a newer one is complete)");
    f("checkpoint_format", checkpoint_format,
      "file | sharded. file: one checkpoint file, gathered to and written by rank 0 (what export and generate "
      "read); sharded: a folder with one file per rank holding what that rank owns and a manifest, written by "
      "every rank at once with no rank holding the whole model, which any layout resumes (resharding) and "
      "'checkpoint --merge' turns into one file (docs/formats.md)");
    f("async_checkpoint", async_checkpoint,
      "sharded checkpoints: copy this rank's state into a host snapshot at the step's end and write it from a "
      "background thread while training goes on (the next save, a stop or the run's end waits for it; the "
      "checkpoint counts once every rank's file is durable); false: the loop waits for the write");
  }
};

// ZeRO's stage over the data-parallel group (DESIGN.md "Memory"): 0 none, 1
// the Adam moments sharded, 2 also the gradients, 3 also the parameters.
// Written as the number; `true` and `false` read as 1 and 0.
enum class ZeroStage { k0, k1, k2, k3 };
std::string to_string(ZeroStage z);
void from_string(const std::string& text, ZeroStage& z);  // throws std::invalid_argument naming parallel.zero

// The parallel layout (DESIGN.md "Parallel layouts"): ranks = dp x tp x cp x pp,
// with tensor-parallel groups of tp consecutive ranks, then context-parallel
// groups, then pipeline stages, then data-parallel replicas
// (parallel/process_grid.h); the block type of each
// layer (model/tensor_parallel.h); the pipeline's microbatches and schedule
// (train/schedule/pipeline.h); the ZeRO stage over the data-parallel group.
struct ParallelConfig {
  int tp = 1;
  std::vector<std::string> block_types;  // one per layer; empty: all tp
  int pp = 1;
  int microbatches = 1;
  ScheduleKind schedule = ScheduleKind::k1F1B;
  ZeroStage zero = ZeroStage::k0;
  bool vocab_parallel = false;
  bool sequence_parallel = false;
  int cp = 1;
  std::vector<std::string> stage_layers;  // layers per pipeline stage; ["auto"]; empty: the default rule
  int virtual_stages = 1;                 // chunks of layers per pipeline rank (interleaved-1f1b, zb-v)
  std::vector<std::string> pass_times;    // zb-v: a chunk's F,B,W times its lists are built for; empty: counted

  int zero_stage() const { return static_cast<int>(zero); }
  // Pipeline stages or microbatches: the step runs a schedule (train/schedule/pipeline.h).
  bool pipelined() const { return pp > 1 || microbatches > 1; }

  // The checks that need no model or rank count (those are in validate(RunConfig)
  // and at start-up); throws std::invalid_argument naming the key.
  void validate() const;
  // The block types parsed (empty stays empty).
  std::vector<BlockType> blocks() const;

  template <typename F>
  void visit_fields(F&& f) {
    f("tp", tp,
      "ranks per tensor-parallel group (Megatron); divides model.n_head, 4 x model.n_embd and the rank count; the "
      "data-parallel size is ranks / tp");
    f("block_types", block_types,
      "one block type per layer: tp (Megatron, the standard function), spd (sync-point drop) or parallel (private "
      "residual runs); empty = all tp. spd and parallel are other functions when tp > 1");
    f("pp", pp,
      "pipeline stages of contiguous layers (embeddings on the first, head and loss on the last); at most "
      "model.n_layer; ranks = data-parallel size x tp x pp");
    f("microbatches", microbatches,
      "microbatches per step (m): each data-parallel replica's rows are cut into m equal parts whose gradients "
      "accumulate (gradient accumulation: with one pipeline stage, m micro-steps of rows / m rows each per "
      "optimizer step); divides the replica's rows");
    f("schedule", schedule,
      "pipeline schedule: gpipe (all forwards, then all backwards), 1f1b (warm-up, one forward one backward, "
      "cool-down), zb-h1 (1f1b with each backward split into B and W, W delayed into the bubbles), "
      "interleaved-1f1b (Megatron's: parallel.virtual_stages v >= 2 chunks a rank, rank r holding chunks r, r + pp, "
      "...; microbatches a multiple of pp) or zb-v (zero bubble in the V shape: 2 chunks a rank, rank r holding "
      "chunks r and 2 pp - 1 - r, B and W split; parallel.virtual_stages 2)");
    f("zero", zero,
      "ZeRO stage over the data-parallel group: 0 off; 1 Adam moments sharded (gradients reduce-scattered, each "
      "rank updates its shard, parameters all-gathered); 2 also the gradients (each layer's reduce-scattered as "
      "the backward finishes it); 3 also the parameters (each layer's all-gathered before its forward and "
      "backward, freed after); true/false = 1/0. Does nothing with one data-parallel rank. 2 with pipeline stages "
      "or microbatches keeps the stage's gradient for the accumulation (stage 1's memory); 3 needs pp 1 and "
      "microbatches 1; 2 and 3 need untied embeddings and tp blocks, on the mpi stage");
    f("vocab_parallel", vocab_parallel,
      "with tp > 1, shard the token embedding, the head and the loss by vocabulary rows over the tensor-parallel "
      "group (Megatron's VocabParallelEmbedding and parallel cross-entropy: the logits are never gathered); each "
      "rank holds ceil(V / tp) rows. false: both replicated on every rank. Does nothing with tp 1");
    f("sequence_parallel", sequence_parallel,
      "with tp > 1, Megatron's sequence parallelism: the residual stream, the norms and the embedding's output "
      "held as this rank's 1/tp of the rows; each tensor-parallel all-reduce becomes a reduce-scatter and the "
      "next norm's all-gather (the same function; serial's bits under train.deterministic). So far pre-norm tp "
      "blocks in fp32, with dp, ZeRO 0-3, pipeline stages (every schedule), recomputation and the vocabulary "
      "cut (docs/tensor_parallel.md)");
    f("cp", cp,
      "ranks per context-parallel group: each row of the batch cut into 2 cp chunks, a rank holding chunk r and "
      "chunk 2 cp - 1 - r (balanced causal work), the attention a ring of key/value blocks merged by their "
      "log-sum-exps; ranks = data-parallel size x tp x cp x pp; the gradient sums over dp x cp. train.seq_len must "
      "divide into 2 cp chunks. So far on the mpi stage, fp32, tp blocks (pre- or post-norm; with or without "
      "sequence_parallel); under train.deterministic with train.sequence_pieces a multiple of 2 cp, which gives "
      "serial's bits (docs/context_parallel.md)");
    f("virtual_stages", virtual_stages,
      "chunks of layers each pipeline rank holds (virtual stages, docs/pipeline.md): pp x virtual_stages stages in "
      "all, placed as parallel.schedule says; 1 = one contiguous stage a rank. More than 1 needs interleaved-1f1b or "
      "zb-v (2), and equal chunks (model.n_layer a multiple of pp x virtual_stages) unless parallel.stage_layers "
      "gives one count per chunk");
    f("pass_times", pass_times,
      "zb-v only: the relative times of a chunk's forward, input-gradient and weight-gradient passes (F,B,W, e.g. "
      "1,1.3,0.5) that its lists are built for; empty = counted by the op table. Lists built for other times than "
      "the machine's leave bubbles: scripts/pass_times.py RUN_DIR reads them off a zb-h1 or zb-v run's timeline "
      "(docs/pipeline.md, \"Virtual stages\")");
    f("stage_layers", stage_layers,
      "layers per pipeline stage (per virtual stage, in layer order, with parallel.virtual_stages), one count per "
      "stage summing to model.n_layer (e.g. 3,2,1), or auto: placed by "
      "their counted cost (the op table's FLOPs and bytes of a layer, of the embedding on the first stage and of the "
      "head and loss on the last), the costliest stage as cheap as it can be; empty = L / pp each, the first "
      "L % pp stages one more (docs/pipeline.md, \"Stage balance\")");
  }
};

struct RunConfig {
  Gpt2Config model{0, 256, 6, 6, 384};  // the original's sizes; vocab_size 0 = the tokenizer's
  DataConfig data;
  TrainConfig train;
  OptimizerConfig optimizer;
  GenerateConfig generate;
  ParallelConfig parallel;
};

// The fields of `c`, bound to it, by section, in documentation order.
Fields run_fields(RunConfig& c);

// Range and consistency checks of every section and across sections, after
// all sources are applied; throws std::invalid_argument naming the key.
void validate(const RunConfig& c);

// The configuration as YAML, every field by section (config.yaml, run.yaml).
std::string to_yaml(RunConfig c);

}  // namespace gpt2
