// A run folder's training checkpoints (issue 43; docs/guarantees.md
// "Complete checkpoints"):
//
//   <out>/checkpoints/step-00000120/checkpoint.bin   the checkpoint after 120 steps
//   <out>/checkpoints/step-00000120/COMPLETE         written last: the save is whole
//   <out>/checkpoint.bin                             the newest complete one (a hard link)
//
// A save makes a fresh step folder (an earlier save of the same step is
// removed first), writes its files (each synced, renamed into place, the
// folder synced), then the COMPLETE marker (a JSON object naming every file
// and its size, synced and renamed into place): only then does the
// checkpoint count. <out>/checkpoint.bin is moved to it after that, and then
// the older ones beyond train.keep_checkpoints, and every incomplete step
// folder (the leftovers of a save a crash cut short), are removed. A reader
// takes only a step folder whose marker is there and agrees with its files,
// and names the ones it skipped.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace gpt2 {

inline constexpr const char* kCheckpointsFolder = "checkpoints";
inline constexpr const char* kCompleteMarker = "COMPLETE";
inline constexpr const char* kCheckpointFile = "checkpoint.bin";
inline constexpr const char* kManifestFile = "manifest.json";  // a sharded checkpoint's (train/formats/sharded_checkpoint.h)

// One step folder of <out>/checkpoints.
struct StoredCheckpoint {
  std::filesystem::path dir;
  int64_t step = 0;
  std::string problem;  // "" when complete; else why it does not count ("no COMPLETE marker: ...")
  bool complete() const { return problem.empty(); }
  // What a reader takes: the folder of a sharded checkpoint, else its checkpoint.bin.
  std::filesystem::path file() const;
};

// The step folders of <out>/checkpoints (names "step-<digits>"; other
// entries are ignored), by step, each checked for completeness. None when
// the folder has no checkpoints folder.
std::vector<StoredCheckpoint> stored_checkpoints(const std::filesystem::path& out);

// Why the step folder `dir` is not a complete checkpoint, or "".
std::string checkpoint_problem(const std::filesystem::path& dir);

// For a checkpoint the user names (--resume, --checkpoint): a step folder
// stands for its checkpoint.bin (a sharded one for itself), and a file in a step folder is taken only
// when that folder is complete (std::invalid_argument naming it otherwise).
// Any other path is returned as it is.
std::string given_checkpoint_file(const std::string& path);

// The folder a save of the checkpoint after `step` steps writes into: made
// fresh (an earlier one of that step removed) and durable in
// <out>/checkpoints. Throws std::runtime_error naming the folder.
std::filesystem::path begin_checkpoint(const std::filesystem::path& out, int64_t step);

// The save into `dir` (begin_checkpoint's) wrote `files`: writes the marker
// (the folder is removed if that fails),
// moves <out>/checkpoint.bin to it (a sharded checkpoint, without a
// checkpoint.bin, removes that older name instead), then removes the complete checkpoints
// older than the newest `keep` (those after `step`, an earlier attempt's
// future, go too) and every incomplete one. Returns the checkpoint file.
std::filesystem::path commit_checkpoint(const std::filesystem::path& out, const std::filesystem::path& dir,
                                        int64_t step, const std::vector<std::string>& files, int keep);

// A save into `dir` failed: its folder is removed (best effort), so a full
// disk keeps its room for the next try.
void abandon_checkpoint(const std::filesystem::path& dir);

}  // namespace gpt2
