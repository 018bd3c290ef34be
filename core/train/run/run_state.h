// RunState: what one rank trains with (tokens, backend, model, optimizer,
// data loader, the step to start from), made by init_or_resume: fresh weights,
// or a training checkpoint read by rank 0 and broadcast to every rank. Every
// check of a checkpoint against the configuration lives in init_or_resume:
// the model, the optimizer, the tokenizer, the seed, the batch and sequence
// sizes, the loader, the validation split and the corpus (its tokens' hash).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <optional>
#include <string>
#include <vector>

#include "parallel/comm.h"
#include "parallel/process_grid.h"
#include "parallel/zero.h"
#include "kernels/backend.h"
#include "model/config.h"
#include "model/dataloader.h"
#include "model/optim.h"
#include "model/params.h"
#include "model/tokenizer.h"
#include "train/formats/checkpoint.h"
#include "train/data/corpus.h"
#include "train/formats/model_source.h"
#include "train/config/run_config.h"
#include "train/resolve/layout.h"
#include "train/schedule/stage_split.h"

namespace gpt2 {

// Where this rank's parameters live, decided once when the model is made
// (make_model, from ZeroSharding::residency): in the model's own buffer (ZeRO 0
// to 2), or only as this rank's pieces of ZeRO-3's unit shards. Resuming, the
// replicas' start-up check, checkpoints and generation reach the parameters
// through it; none of them asks which it is.
class ParamHome {
 public:
  virtual ~ParamHome() = default;
  // This rank's weights (its tp shard of its stage, whole) into where they live.
  virtual void load(const std::vector<float>& local) = 0;
  // model.init's weights from `seed`, where they live (ZeRO-3 under philox:
  // each piece computed where it lands, no rank holding the whole model).
  virtual void init(uint64_t seed) = 0;
  // The hash of the weights as loaded or initialised, which the replicas
  // compare at start-up; none where no rank holds them whole (ZeRO-3 from
  // the seed: its pieces are a function of the seed the ranks agreed on).
  virtual std::optional<uint64_t> start_hash() = 0;
  // This rank's weights, whole, on the host where `keep` (else nothing).
  // Collective over the data-parallel group under ZeRO-3: every rank of it calls this.
  virtual std::vector<float> gather(bool keep) = 0;
  // Whether the model holds them (generation then runs it as it is).
  virtual bool in_model() const = 0;
  // Sharded checkpoints (train/formats/sharded_checkpoint.h): the ranges of this
  // rank's part it holds, and where (host memory; base nullptr on a device).
  virtual std::vector<ShardRange> held() const = 0;
  virtual StateAt host_at() const = 0;
  // Fills what this rank holds in place: values(begin, out) gives floats
  // [begin, begin + out.size()) of its part (no whole copy on the host).
  virtual void load(const std::function<void(size_t begin, std::span<float> out)>& values) = 0;
};

// How this rank's Adam moments are cut from the whole model's, decided once
// when the model is made (make_model, with the ZeRO layout): whole (ZeRO 0),
// a contiguous range (ZeRO-1, and 2 under a schedule or the tree) or
// ZeRO-2/3's unit pieces. Resuming cuts a checkpoint's moments with `cut`; a
// checkpoint gathers them back with `gather`; the log names `updated()`.
class MomentShard {
 public:
  virtual ~MomentShard() = default;
  // This rank's part of the whole (its tp shard of its stage) `whole`.
  virtual std::vector<float> cut(std::vector<float> whole) const = 0;
  // The whole from every rank's `part`: collective over the data-parallel
  // group `dp` when the moments are sharded (every rank calls it).
  virtual std::vector<float> gather(std::vector<float> part, Communicator& dp) const = 0;
  // The parameters whose moments this rank holds, and the units they are cut by (0: none).
  virtual size_t updated() const = 0;
  virtual size_t units() const { return 0; }
  // The ranges of the part this rank's moments hold, and whether they are
  // packed in that order (ShardRange::pos; else at their own offsets).
  virtual std::vector<ShardRange> held() const = 0;
  virtual bool packed() const { return true; }
  // Every data-parallel rank holds the same whole moments (ZeRO 0).
  virtual bool replicated() const { return false; }
};

// Where this rank's parameters and Adam moments live, made once from the
// layout's ZeRO sharding (RunLayout::step.zero; make_model): the sharding
// itself, the shards it cuts (contiguous: ZeRO-1, or 2 under a schedule or
// the tree; unit-aligned: ZeRO-2 and 3, parallel/zero.h), and the homes the
// loop, the loaders and the checkpoint writer read and write through.
struct StateHomes {
  ZeroSharding zero;                          // as resolved: ZeRO 0 with one data-parallel rank
  std::optional<ContiguousShard> contiguous;  // zero.contiguous
  std::unique_ptr<ZeroShards> units;          // zero.unit_shards()
  std::unique_ptr<ParamHome> params;          // the model's buffers, or ZeRO-3's shards
  std::unique_ptr<MomentShard> moments;       // which part of the Adam moments this rank holds
};

struct RunState {
  RunState() = default;
  RunState(const RunState&) = delete;  // the loader views data's tokens
  RunState& operator=(const RunState&) = delete;

  int rows = 0;                 // this rank's rows of every global batch
  Corpus data;                  // the tokenizer and the token streams, on every rank
  uint64_t corpus_hash = 0;     // data.hash(): compared across ranks, recorded in checkpoints
  Gpt2Config model_config;      // resolved: vocab_size set
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Gpt2> model;  // in the backend's memory
  StageSplit stage_split;  // the (virtual) stages' layers and ranks (train/schedule/stage_split.h), resolved in make_model
  std::unique_ptr<Optimizer> opt;
  StateHomes homes;                  // where the parameters and moments live, as ZeRO's sharding lays them out
  std::optional<DataLoader> loader;  // this rank's rows of the training split
  bool eval_on = false;              // train.eval_every > 0 and a validation split
  int64_t first_step = 0;            // > 0 when resumed
  // Resumed (rank 0): the checkpoint's "run.id" ("" before format 3), and the
  // resume checks its format had no record for.
  std::string checkpoint_run_id;
  std::vector<std::string> unchecked;
};

// Whether the training checkpoint at `path` (what `--resume auto` found; rank
// 0) is this configuration's run finished already: at train.steps, its
// settings those of `c` (every check resume makes but the corpus's, which is
// not read here). Settings that differ throw as resume would
// (std::invalid_argument naming the key).
bool finished_checkpoint(const std::string& path, const RunConfig& c);

// Collective. Every rank's resolved configuration must equal rank 0's: else
// every rank throws the same std::invalid_argument naming the first key that
// differs and its values. Called before anything is laid out by it (the
// process grid, the corpus broadcast).
void check_ranks_agree(const RunConfig& config, Communicator& comm);

// Collective. Divides the batch over the ranks, reads the corpus (rank 0;
// with the checkpoint's vocabulary when resuming), resolves the model's
// vocabulary, makes the data loader and the backend (`kind` with
// `options`), then the model and optimizer in its memory and the
// parameters' and moments' homes (ParamHome, MomentShard): fresh weights
// (every rank computes the same Philox values) or the checkpoint `resume`
// (rank 0 reads it, checks it against `c` and broadcasts it; a sharded one,
// train/formats/sharded_checkpoint.h, every rank opens, and reads only the floats it
// holds, straight into place: no rank holds the whole model). Ends by
// checking that every rank holds bit-identical weights. Throws
// std::invalid_argument for bad input (naming the key, file or value).
// With tensor parallelism (grid.tp() > 1) the model is this rank's shard
// of the same global weights; the batch is divided over the data-parallel
// group (grid.dp() ranks), and a checkpoint (always the full model) is
// broadcast and sharded.
// The backend is made with backend_options (train/resolve/layout.h) of the
// resolved model, `threads` and `device_hint`.
// `given` (rank 0's; the evaluate command): a model already read, whose
// tokenizer and weights stand in for data.*'s tokenizer and train.init_from.
struct GivenModel {
  const Tokenizer* vocabulary = nullptr;  // the tokenizer the corpus is read with
  const ModelWeights* weights = nullptr;  // source's model file, read already and fitted as train.init_from's is
};
std::unique_ptr<RunState> init_or_resume(const RunLayout& run, const StateSource& source, const BackendKind& kind,
                                         int threads, int device_hint, ProcessGrid& grid,
                                         const GivenModel& given = {});

// Writes a training checkpoint of `st` (rank 0 calls it) with what resume
// checks recorded in its header: the model and optimizer sections, the
// tokenizer, train.seed, train.batch_size, train.seq_len, data.loader,
// data.val_fraction, the corpus's token count and hash, and the run's id.
// What a training checkpoint records of its run besides the state and the
// model: the seed and the settings the curve depends on (curve_entries, with
// the corpus read), made once when the run is built (checkpoint_record) and
// held by its writer.
struct CheckpointRecord {
  uint64_t seed = 0;
  KeyValues curve;
};
CheckpointRecord checkpoint_record(const RunConfig& c, const RunState& st);

// Collective over every rank: with ZeRO-1 the moments' shards are first
// gathered over each data-parallel group; then over the ranks of
// data-parallel rank 0 (the others return) the stages' tensors and their
// tensor-parallel shards of the weights and moments are gathered, checked
// (replicated tensors equal on every rank of a tensor-parallel group) and
// written by world rank 0 as one full-model checkpoint, which any layout resumes.
// Returns, on world rank 0, RunSummary::state_hash's value of what it wrote
// (0 on the other ranks). An empty `path` gathers and hashes, and writes nothing.
uint64_t save_training_checkpoint(const std::string& path, const RunState& st, const CheckpointRecord& record,
                                  const std::string& run_id, ProcessGrid& grid);

// save_training_checkpoint into the run folder `out_dir`'s store, as the
// checkpoint after `steps` steps (train/formats/checkpoint_store.h: a step folder,
// complete once its marker is written; `keep` of them kept). A save
// that fails leaves no step folder behind. Collective; on world rank 0,
// returns the checkpoint file (the others: "") and sets `*hash`.
std::string store_training_checkpoint(const std::string& out_dir, int64_t steps, const RunState& st,
                                      const CheckpointRecord& record, int keep, const std::string& run_id,
                                      ProcessGrid& grid, uint64_t* hash = nullptr);

// The header entries of a training checkpoint of `st` as it is now (the
// one-file format's and a sharded manifest's): checkpoint_header's with
// the counters, and what resume checks (the curve's entries, the run id).
KeyValues training_header(const RunState& st, const CheckpointRecord& record, const std::string& run_id);

// The function a layout computes, as checkpoints record it ("parallel.function"):
// "standard" (every layout whose blocks are all tp, or one rank per group),
// else "tp=P:types" (spd and parallel blocks are other functions for each P).
std::string parallel_function(const ParallelConfig& p);

// The full model's host arrays from this rank's part (`local`: its pipeline
// stage's tensors, its tensor-parallel shard of them), gathered over the
// tensor-parallel and pipeline groups (collective over this replica's ranks;
// every one of them gets the result). `vocab`: the shards cut the vocabulary
// too (TpShape).
// `split`: the layers each pipeline rank holds (train/schedule/stage_split.h; no
// counts: one stage, the whole model).
std::vector<float> gather_full(const Gpt2Config& cfg, ProcessGrid& grid, const std::vector<float>& local,
                               const StageSplit& split = {}, bool vocab = false);


}  // namespace gpt2
