// A training run's output directory, owned by the run for its whole life.
//
// The directory is locked (util/files.h DirectoryLock: a second run into it
// fails at once, naming the holder) and what it already holds decides what
// may happen:
//   nothing            any run starts there;
//   a run (finished:   metrics.jsonl; interrupted: metrics.jsonl.partial,
//   checkpoint.bin, checkpoints/ or config.yaml without metrics.jsonl)
//                      refused unless the user says --resume (continue that
//                      very run: the checkpoint must be the run's own, and its
//                      earlier metrics are kept) or --overwrite (the old run's
//                      files are removed first: nothing old mixes with the new).
// run.json names the run (a random id, also written into every checkpoint's
// header as "run.id"), so a checkpoint can be matched to its directory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "util/files.h"

namespace gpt2 {

enum class DirIntent { kNew, kResume, kOverwrite };

class RunDirectory {
 public:
  // Creates `out` if needed, locks it, checks that it is writable and that
  // what it holds allows `intent`; writes nothing into it. Throws
  // std::invalid_argument naming --out and the directory.
  // `inputs` (the run's --config file) are never taken for run files: not
  // counted as a run the directory holds, never removed by --overwrite.
  RunDirectory(const std::filesystem::path& out, DirIntent intent, const std::string& stage,
               const std::vector<std::filesystem::path>& inputs = {});

  // Resume only: refuses a checkpoint that does not belong to the run in the
  // directory (its run.id differs from run.json's; or, for a checkpoint or a
  // directory from before run ids, unless it is the directory's own
  // checkpoint.bin). An empty directory takes any checkpoint: the run then
  // continues there under the checkpoint's id. Sets run_id().
  void check_resume(const std::string& checkpoint_path, const std::string& checkpoint_run_id);

  // The run starts writing: kOverwrite removes the old run's files (only
  // now, once the new run's input has been checked), then run.json is
  // written (the run id, the stage, the holder: pid, host, start time).
  void begin();

  const std::filesystem::path& path() const { return out_; }
  const std::string& run_id() const { return run_id_; }

 private:
  std::filesystem::path out_;
  std::string stage_;
  DirectoryLock lock_;
  DirIntent intent_;
  std::vector<std::filesystem::path> inputs_;
  bool holds_run_ = false;    // any run file is there
  std::string dir_run_id_;    // run.json's id, "" if none
  std::string run_id_;
};

// `--resume auto` (issue 43; issue 70): what the folder `out` holds decides,
// before anything is written:
//   missing or empty                       a fresh start;
//   anything but a run of this engine      refused, nothing touched: the
//   (no run.json naming a run id)          folder holds the user's files;
//   a run with a complete checkpoint       resume from the newest complete
//                                          step folder whose bytes are whole
//                                          (train/formats/checkpoint_store.h;
//                                          stored_checkpoint_problem), else
//                                          from checkpoint.bin (a run from
//                                          before step folders); the
//                                          incomplete or damaged ones are
//                                          named and not taken;
//   a run that wrote no checkpoint         a fresh start over its files (as
//                                          --overwrite), refused when its
//                                          checkpoints folder holds anything
//                                          but step folders;
// and std::invalid_argument (exit 2), naming the folder, for a run whose
// only checkpoints are incomplete or damaged.
struct AutoResume {
  std::string checkpoint;            // to resume from; "" for a fresh start
  int64_t step = -1;                 // the checkpoint's step (its folder's), -1 when not known
  bool replace = false;              // a fresh start over an earlier attempt's files
  std::vector<std::string> skipped;  // incomplete or damaged checkpoints, not taken
  std::string note;                  // one line for the log: what was decided and why
};
AutoResume resolve_auto_resume(const std::filesystem::path& out);

// A fresh random run id (16 hex digits).
std::string new_run_id();

}  // namespace gpt2
