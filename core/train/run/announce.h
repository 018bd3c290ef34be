// What a run says and records about itself at its start: the MFU peak, the
// provenance of its summary, the log's opening lines.
#pragma once

#include <string>

#include "parallel/comm.h"
#include "train/resolve/layout.h"
#include "train/run/mfu_peak.h"
#include "train/run/run_logger.h"
#include "train/run/run_state.h"
#include "train/run/requests.h"
#include "util/json.h"

namespace gpt2 {

// The MFU denominator: the configured peak, or the matrix-product ceiling of
// all the job's backends, measured by rank 0 while the others wait idle (on
// one machine; give train.peak_gflops for several) and raised to the best
// ever measured here for this layout (train/run/mfu_peak.h), so that a busy
// start-up does not lower it.
MfuPeak mfu_peak(const RunConfig& c, const ProgramContext& ctx, RunState& st, Communicator& comm, int threads);

// The summary's provenance: build and machine, the kernel libraries, and how this run was laid out.
Json run_provenance(const TrainRequest& req, const ProgramContext& ctx, const RunState& st, Communicator& comm,
                    int threads, const MfuPeak& peak, const std::string& run_id);

// The two lines that open a run's log: the model and data, the layout and the MFU peak.
void announce(const RunLogger& log, const RunLayout& run, const RunState& st, Communicator& comm, int threads,
              const MfuPeak& peak, double max_loss);

}  // namespace gpt2
