// The command line every stage program shares, and the main() of the tools:
//   <stage> train    [--config FILE] [--out DIR] [--resume CKPT] [--overwrite] [--hostfile FILE] [--KEY VALUE ...]
//   <stage> generate --checkpoint CKPT [--prompt TEXT] [--config FILE] [--KEY VALUE ...]
//   <stage> evaluate --model PATH [--data PATH] [--hellaswag FILE] [--config FILE] [--KEY VALUE ...]
//   <stage> config   [--config FILE] [--KEY VALUE ...]
// KEY is any configuration key (section.name, see --help); the options and
// the keys come from field lists (util/fields.h, train/config/run_config.h). The
// YAML file is applied first, then the overrides in order. Exit status: 0
// success, 2 bad input (usage, configuration, files), 1 failure while
// running, 3 the stage cannot run on this machine.
#pragma once

#include <string>

#include "train/run/trainer.h"

namespace gpt2 {

inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
// This machine cannot run the stage (e.g. no CUDA device): the harness
// records the run as skipped, not failed.
inline constexpr int kExitUnavailable = 3;

// `help_note`: stage-specific lines for --help (environment, exit codes).
int stage_main(int argc, char** argv, const ProgramContext& ctx, const std::string& help_note = "");

// main() of a tool (the benchmark programs): runs `run`; a BackendUnavailable
// becomes "<program>: <what>" and kExitUnavailable, any other exception
// "<program>: error: <what>" and kExitUsage for std::invalid_argument (bad
// input), kExitFailure otherwise: the stages' exit statuses.
int tool_main(const char* program, int (*run)(int, char**), int argc, char** argv);

// Reports an error the way stage_main does (once per job; every rank ends)
// and returns `code`: for a stage's own start-up checks.
int stage_main_error(const ProgramContext& ctx, const char* what, int code);

}  // namespace gpt2
