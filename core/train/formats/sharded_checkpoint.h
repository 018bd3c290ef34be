// Sharded training checkpoints (issue 44; docs/formats.md "Training
// checkpoints: one file, or sharded"): a folder with one file per rank holding what that rank
// owns, a manifest naming every tensor and which file holds which floats,
// and the vocabulary:
//
//   manifest.json    the header (the one-file format's key/value entries),
//                    every tensor's name, global shape and offset, and every
//                    rank file with its size, checksum, the part of
//                    the model it was cut from (tp size and rank, vocabulary
//                    cut, pipeline stage) and its ranges of that part
//   vocabulary.bin   the tokenizer's vocabulary, as the one-file format stores it
//   rank-00003.bin   "GPT2SHRD", u32 version 1, u32 rank, u64 step, u64 n,
//                    u32 length + the run id; then n parameters, n Adam m,
//                    n Adam v (the rank's runs of the whole model's buffer, in
//                    the order of its ranges); then the checksum of every
//                    byte before it (util/hash.h Fnv1a64x4)
//
// What a rank owns: the ranges of its part it writes (RankPart::ranges:
// ZeRO's shard, or an even share of a replicated part), less the tensors
// every rank of a tensor-parallel group holds whole, which its rank 0
// writes. Over all files, the runs tile the whole model exactly once: a
// loader checks that before reading anything, and then every rank of any
// layout reads just the floats it holds from whichever files hold them,
// straight into where they live.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/optim.h"
#include "model/params.h"
#include "parallel/comm.h"
#include "train/formats/checkpoint.h"
#include "train/formats/checkpoint_store.h"

namespace gpt2 {

inline constexpr const char* kVocabularyFile = "vocabulary.bin";

// The three arrays of a training checkpoint, in file order.
enum class StateArray { kParams = 0, kM = 1, kV = 2 };

// The part of the model a rank's arrays are laid out by (tensor-parallel
// rank `tp_rank` of `tp`'s shard of `stage`: model/params.h shard_of), and
// the ranges [lo, hi) of it the rank writes or reads, in increasing order.
struct RankPart {
  TpShape tp;
  int tp_rank = 0;
  StageLayers stage;
  std::vector<ShardRange> ranges;
};

// `r` without its empty ranges (ZeRO's piece of a small unit may be empty;
// a RankPart holds none).
std::vector<ShardRange> nonempty(std::vector<ShardRange> r);

// The ranges of its part (n floats) a rank writes: those its moments hold
// (`held`: ZeRO's shard), or, where every rank of its data-parallel group
// holds the whole part (`replicated`: ZeRO 0), the even share dp_rank of
// dp. The writer and the plan both take this.
std::vector<ShardRange> owned_ranges(size_t n, int dp, int dp_rank, bool replicated, std::vector<ShardRange> held);

// One contiguous run of the whole model's buffer a rank writes: floats
// [full, full + count), which are floats [local, local + count) of its part.
struct GlobalRun {
  size_t full = 0, local = 0, count = 0;
};
// The runs of `part`'s ranges, in their order; `owned`: the replicated
// tensors only on tensor-parallel rank 0 (what a rank file holds).
std::vector<GlobalRun> global_runs(const Gpt2Config& cfg, const RankPart& part, bool owned);

// Where a rank's arrays are: element i (of its part) of range r at
// base + r.pos + (i - r.lo) when packed, else base + i (model/optim.h).
struct RankArrays {
  StateAt params, m, v;
  const StateAt& operator[](StateArray a) const { return a == StateArray::kParams ? params : a == StateArray::kM ? m : v; }
};

// What one rank file holds, as the manifest records it.
struct RankFile {
  std::string name;  // "rank-00003.bin"
  int rank = 0;
  uint64_t bytes = 0, checksum = 0, floats = 0;  // floats: n, per array
  RankPart part;
};

// A RankFile as text and back (what the ranks send rank 0 for the manifest).
std::string rank_file_record(const RankFile& f);
RankFile parse_rank_file_record(const std::string& text);

// Writes `rank`'s file into `dir` (synced, unless `sync` is false: the
// caller then makes many files durable at once, sync_filesystem), holding its
// owned runs of `part` from `arrays`, through a bounded buffer. Returns the
// manifest's entry.
RankFile write_rank_file(const std::filesystem::path& dir, int rank, int64_t step, const std::string& run_id,
                         const Gpt2Config& cfg, const RankPart& part, const RankArrays& arrays, bool sync = true);

// Writes the manifest and the vocabulary (synced) once every rank file is:
// `header` as checkpoint_header's, `files` in rank order.
void write_manifest(const std::filesystem::path& dir, int64_t step, const std::string& run_id,
                    const Gpt2Config& cfg, const KeyValues& header, const std::string& vocabulary,
                    const std::vector<RankFile>& files);

// The bytes a rank file of `part` takes (the plan's figure).
uint64_t rank_file_bytes(const Gpt2Config& cfg, const RankPart& part, const std::string& run_id);

// Whether `dir` is a sharded checkpoint folder (holds a manifest).
bool is_sharded_checkpoint(const std::filesystem::path& dir);
// Whether `name` is a rank file's name ("rank-" digits ".bin"), of any rank.
bool is_rank_file_name(std::string_view name);
// A rank's file in the folder: "rank-00003.bin".
std::string rank_file_name(int rank);

// A sharded checkpoint opened for reading: the manifest checked against
// itself (its tensors against its model configuration, every file's part
// and ranges valid, the runs tiling the model exactly once, every rank
// file's size and header), nothing of the arrays read yet. Throws
// std::invalid_argument naming the file and the problem (bad input: the
// stages' exit 2).
class ShardedCheckpoint {
 public:
  explicit ShardedCheckpoint(const std::filesystem::path& dir);
  ~ShardedCheckpoint();
  ShardedCheckpoint(const ShardedCheckpoint&) = delete;
  ShardedCheckpoint& operator=(const ShardedCheckpoint&) = delete;

  // The header, configuration, tokenizer and training counters (no arrays).
  const Checkpoint& header() const { return header_; }
  const std::vector<RankFile>& files() const { return files_; }
  const std::filesystem::path& dir() const { return dir_; }
  std::string run_id() const { return run_id_; }
  int64_t step() const { return step_; }

  // Reads the whole file `i` and compares its checksum with its own and the
  // manifest's; "" when both match, else the problem, naming the file.
  std::string verify(size_t i) const;
  // Floats [full, full + out.size()) of array `a` of the whole model, from
  // whichever files hold them (read straight into `out`).
  void read(StateArray a, size_t full, std::span<float> out) const;
  // The floats of `part`'s ranges of array `a` into where they live (as
  // RankArrays': `at.packed`), vocabulary padding zeroed.
  void read_part(StateArray a, const RankPart& part, StateAt at) const;
  // Bytes read by read_part of `part` (each of three arrays), for the plan.
  static uint64_t part_bytes(const Gpt2Config& cfg, const RankPart& part);

 private:
  struct Run {
    size_t full = 0, count = 0, file = 0, pos = 0;  // pos: floats into the file's array
  };
  std::filesystem::path dir_;
  Checkpoint header_;
  std::string run_id_;
  int64_t step_ = 0;
  std::vector<RankFile> files_;
  std::vector<Run> runs_;  // every file's runs, by `full`: they tile the model
  // The rank files open for reading (-1: closed), at most kMaxOpenRankFiles
  // at once, opened when read and closed oldest first; each must be the file
  // (device, inode) whose header was checked.
  static constexpr size_t kMaxOpenRankFiles = 64;
  mutable std::vector<int> fds_;
  mutable std::deque<size_t> open_order_;
  std::vector<std::pair<dev_t, ino_t>> ids_;
  int rank_fd(size_t i) const;
  uint64_t header_bytes() const;
  // Where runs_ (sorted) do not tile the model's n floats exactly once: the
  // first gap or overlap, naming its tensor; "" where they do.
  std::string coverage_problem(const std::vector<ParamInfo>& infos, size_t n) const;
  // Each file: there, of the size recorded, and its header this checkpoint's
  // (each opened, checked and closed again).
  void open_rank_files();
};

// Collective: every rank opens `dir` (ShardedCheckpoint's checks), then the
// rank files' checksums are verified, file i by rank i % comm.size() (each
// byte read once); a mismatch throws std::invalid_argument on every rank,
// naming the file.
std::unique_ptr<ShardedCheckpoint> open_sharded_checkpoint(const std::filesystem::path& dir, Communicator& comm);

// The whole checkpoint (arrays merged) as the one-file format's Checkpoint:
// every file verified first. Whole-model memory: for the serial commands.
Checkpoint merge_sharded(const ShardedCheckpoint& ck);

}  // namespace gpt2
