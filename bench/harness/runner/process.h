// Starting the programs the harness measures: stage programs, benchmark
// programs, the PyTorch peer, gnuplot. Each runs in its own process group,
// its output in a log, under a timeout that ends the whole group (mpiexec and
// every rank). Also what is read back from a log, and the one convention the
// harness shares with the programs it starts: exit status 3 means "this
// machine cannot run me" (app/cli.h's kExitUnavailable; a contract between
// processes, so it is written down here rather than included).
// Not a general process library: no pipes into the child, no job control.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace gpt2::harness {

// A program that cannot run on this machine (no CUDA device, say) exits with
// this status; the harness records it as skipped, not failed.
inline constexpr int kExitUnavailable = 3;
// The stage program stopped for a signal after writing its checkpoint
// (train/schedule/preemption.h's kExitPreempted): the run is resumable.
inline constexpr int kExitPreempted = 4;

// Every process a launch starts, and everything those start (mpiexec's
// proxies and ranks included), carries this variable in its environment,
// set to "<harness pid>.<launch>": how the harness finds the whole run, which
// no process group holds (MPICH's Hydra starts each proxy and rank in a
// session of its own). tests/checks.py finds leftovers the same way.
inline constexpr const char* kRunTagVariable = "GPT2_HARNESS_RUN";

struct LaunchOptions {
  double timeout_s = 0;                                     // > 0: end the process group after this long
  bool append_log = false;                                  // append to the log (with a "$ command" line) instead of replacing it
  std::vector<std::pair<std::string, std::string>> env;     // set in the child
  std::vector<std::string> unset_env;                       // removed in the child
  std::filesystem::path cwd;                                // the child's working directory, if not empty
  std::function<void()> on_tick;                            // called about every 0.5 s while the child runs
  std::function<void()> if_harness_dies;                    // the guardian's last act when the harness died
};

// Runs argv with stdout and stderr to `log`, in its own process group so a
// timeout (or the harness's own SIGINT/SIGTERM) ends it and its children.
// No process of the run outlives the call: when the program has ended, or
// the timeout ends it, every process tagged with the run (kRunTagVariable)
// gets SIGTERM and, 3 s later, SIGKILL (leftovers after a normal end are
// named in the log). A guardian process, forked first, does the same if the
// harness itself dies, even by SIGKILL, and then runs opt.if_harness_dies
// (the Slurm launcher's: cancel the run's job).
// Returns the exit status, 128 + signal for a killed program, or -1 on
// timeout; throws std::runtime_error if the program cannot be waited for.
int launch(const std::vector<std::string>& argv, const std::filesystem::path& log, const LaunchOptions& opt);

// What a short-lived program printed: for `serial config`, whose stdout is data.
struct Captured {
  int status = 0;
  std::string out, err;
};
// Runs argv to completion with stdout and stderr captured; throws
// std::runtime_error if it cannot be started.
Captured capture(const std::vector<std::string>& argv);

// The last line of a program's log that carries an error message ("error:"), or "".
std::string error_from_log(const std::filesystem::path& log);
// The last non-empty line of a log, or "".
std::string last_line_of(const std::filesystem::path& log);

// The full path of an executable regular file `name` on PATH, or "".
std::string find_on_path(const std::string& name);

// A command line as the shell text that runs it: the harness's one quoting
// function, for logs, reports' "Reproduce with" lines and the words of a
// Slurm job script's shell lines (runner/slurm.cpp). A word of letters,
// digits and _ - . / : , + @ (and '=', but in the first word, where
// NAME=value would set a variable) is written as it is; any other word,
// the empty one included, is single-quoted, inside which the shell reads
// nothing but the closing quote (a ' itself is written '\'').
std::string command_text(const std::vector<std::string>& argv);

}  // namespace gpt2::harness
