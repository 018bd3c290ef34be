// How a run saves its training checkpoints, chosen once from
// the run's CheckpointSink (train.checkpoint_format, async_checkpoint; make_checkpoint_writer):
//
//   file      store_training_checkpoint: gathered to world rank 0, one file.
//   sharded   every rank writes the file of what it owns (its ZeRO shard,
//             or an even share of what its data-parallel replicas all hold;
//             a tensor-parallel group's replicated tensors by its rank 0)
//             into the step folder at once; world rank 0 then writes the
//             manifest and the COMPLETE marker (train/formats/sharded_checkpoint.h).
//   sharded + async
//             the same files from a host snapshot of the rank's state taken
//             at the step's end, written by a background thread while
//             training goes on. The save completes (manifest, marker) at the
//             first step end where every rank's file is durable (poll), or
//             when the next save, a stop or the run's end waits for it
//             (finish).
//
// A failure on any rank (a full disk) fails the save on every rank: the
// step folder is removed, the previous complete checkpoint stays, and the
// run stops with the first failing rank's message.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "parallel/process_grid.h"
#include "train/config/run_config.h"
#include "train/resolve/layout.h"
#include "train/run/run_state.h"

namespace gpt2 {

class CheckpointWriter {
 public:
  virtual ~CheckpointWriter() = default;
  // Collective. Saves the state after `steps` steps into the run folder's
  // store, first completing a save still being written. Returns the
  // checkpoint's path (on world rank 0; a sharded one's on every rank);
  // `hash`: RunSummary::state_hash's value where the format gives one
  // (the one-file format), else 0.
  virtual std::string save(const std::string& out_dir, int64_t steps, const RunState& st, const std::string& run_id,
                           ProcessGrid& grid, uint64_t* hash) = 0;
  // Collective: RunSummary::state_hash's value of the state as it is now,
  // gathered as the one-file format would write it, written nowhere.
  uint64_t state_hash(const RunState& st, const std::string& run_id, ProcessGrid& grid) const {
    return save_training_checkpoint("", st, record_, run_id, grid);
  }
  // Collective, at a step's end: completes a background save once every
  // rank's file is written (one small all-gather while one is under way).
  // `steps`: the steps done now. Returns the step of the save it completed, else -1.
  virtual int64_t poll(ProcessGrid&, int64_t /*steps*/) { return -1; }
  // Collective: waits for a background save and completes it (`steps` done now).
  virtual void finish(ProcessGrid&, int64_t /*steps*/) {}
  // Whether save() gives RunSummary::state_hash's value (the one-file format).
  virtual bool hashes() const { return false; }
  // Seconds the last save() kept the loop waiting: the whole write, or an
  // asynchronous save's snapshot copy (and its wait for the one before).
  double last_wait_s() const { return last_wait_s_; }
  // Of that, the asynchronous save's snapshot copy (0 for the others).
  double last_snapshot_s() const { return last_snapshot_s_; }

 protected:
  explicit CheckpointWriter(CheckpointRecord record) : record_(std::move(record)) {}
  CheckpointRecord record_;  // what each checkpoint records of the run (run_state.h)
  double last_wait_s_ = 0, last_snapshot_s_ = 0;
};

// The writer `sink` names (the layout's CheckpointSink), recording `record`
// in each checkpoint; `note` says when an asynchronous save completes (the run's log).
// `delay_s`: the tests' wait before each rank's file of a sharded save is written.
std::unique_ptr<CheckpointWriter> make_checkpoint_writer(const CheckpointSink& sink, CheckpointRecord record,
                                                         std::function<void(const std::string&)> note = {},
                                                         double delay_s = 0);

}  // namespace gpt2
