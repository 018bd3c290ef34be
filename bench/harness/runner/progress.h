// The live progress of a running job (harness run): a line fed from the
// stage's metrics stream while it trains, "[k/N] id: step s/S, loss L, T
// tokens/s, M:SS left". On a terminal the line is rewritten in place every
// half second and cleared when the job ends; otherwise one line per run is
// printed when the run ends, with its last figures; --quiet prints none.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace gpt2::harness {

enum class ProgressMode { kLive, kLines, kQuiet };
// kLive when stderr is a terminal, else kLines; kQuiet when `quiet`.
ProgressMode default_progress_mode(bool quiet);
void set_progress_mode(ProgressMode mode);

// Around one job (job_loop.cpp): its "[k/N] id" prefix.
void progress_begin(const std::string& prefix);
void progress_end();

// From a running stage (stage_runner.cpp): reads the metrics stream being
// written in `dir` (metrics.jsonl.partial, or metrics.jsonl once renamed) and
// updates the line; `steps` is the run's train.steps.
void progress_from_metrics(const std::filesystem::path& dir, int64_t steps);

}  // namespace gpt2::harness
