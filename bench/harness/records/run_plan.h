// The engine's plan of a run as the harness keeps it: plan.json in the run's
// folder, the stage program's `plan` output written when the run started
// (docs/plan.md). Every layout, count and formula a report shows beside a
// measurement is read from here; the harness works none of them out.
#pragma once

#include <filesystem>
#include <optional>

#include "util/json.h"

namespace gpt2::harness {

// The plan in `run_dir`, or none for a folder without plan.json. Throws
// std::runtime_error naming the file for one that is not a plan.
std::optional<Json> read_plan(const std::filesystem::path& run_dir);

}  // namespace gpt2::harness
