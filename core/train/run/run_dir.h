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

// `--resume auto` (issue 43): what the folder `out` holds decides, before
// anything is written:
//   missing or empty                       a fresh start;
//   a run with a complete checkpoint       resume from the newest complete
//                                          step folder (train/formats/checkpoint_store.h),
//                                          else from checkpoint.bin (a run
//                                          from before step folders); the
//                                          incomplete ones (a save cut short)
//                                          are named and not taken;
//   a run that wrote no checkpoint         a fresh start over its files (as
//                                          --overwrite);
// and std::invalid_argument (exit 2), naming the folder, for files but no
// run, or a run whose only checkpoints are incomplete temporaries.
struct AutoResume {
  std::string checkpoint;            // to resume from; "" for a fresh start
  bool replace = false;              // a fresh start over an earlier attempt's files
  std::vector<std::string> skipped;  // incomplete checkpoints, not taken
  std::string note;                  // one line for the log: what was decided and why
};
AutoResume resolve_auto_resume(const std::filesystem::path& out);

// A fresh random run id (16 hex digits).
std::string new_run_id();

}  // namespace gpt2
