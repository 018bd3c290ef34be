// PyTorch peer experiments (`kind: peer`): our training step against the
// same step in PyTorch, side by side. Per thread count one job of the job
// loop (job_loop.h) writes the initial weights once (`train_step
// --save-init`), then runs ours (`build/bench/train_step --json`) and the
// peer (bench/peers/torch_gpt2.py, the model the PyTorch cross-check tests
// against, loaded with the same weights) alternately, round after round, so
// that drift of the machine's speed during the job falls on both sides.
//
//   kind: peer
//   name: peer                       # default: the file's stem
//   description: ...
//   preset: original                 # model of both sides (train_step --preset): original | small
//   batch: 16                        # rows per step
//   seq: 0                           # tokens per row; 0 = the preset's block size
//   threads: [1, 2]                  # one job per thread count ...
//   busy_processes: [0]              # ... and per number of busy processes competing for the cores
//   rounds: 3                        # ours then the peer, this many times
//   steps: 3                         # timed steps per side and round; their median is the round's
//   warmup: 1                        # untimed steps before them
//   timeout_s: 3600                  # per job
//   python: /usr/bin/python3         # an interpreter with PyTorch (Debian's python3-torch)
//   unset_env: [OPENBLAS_CORETYPE]   # variables removed from both sides' environment
//
// busy_processes: each job of N > 0 starts N processes that only spin (a
// tight loop, like `sh -c 'while :; do :; done'`) before its first round and
// kills them after its last, however the job ends; both sides are timed
// against the same load. Their job ids and labels carry the number
// ("t2-busy1"), so runs with and without load are distinct results.
//
// Both sides run single-pool: ours OpenMP with OpenBLAS single-threaded
// inside it; the peer torch.set_num_threads(N) with OPENBLAS_NUM_THREADS=N
// and OMP_NUM_THREADS=N (Debian's torch uses OpenBLAS; as installed its pools
// fight over the cores).
//
// Results: results/<name>/peer-t<N>[-busy<M>]-<hash>/ with job.json (the settings),
// ours-<k>.json and peer-<k>.json (round k of each side, as each program
// wrote it), log.txt (every command and its output) and status.json; the
// weights are removed after the job (they are seed 1's, reproducible).
// results/<name>/jobs.csv indexes the jobs (label column "job": t<N>, or
// t<N>-busy<M> with M busy processes). A job whose interpreter cannot import
// torch, or without train_step, is skipped with the reason. Report: reports/<name>/peer.md and peer.csv, the median
// over rounds of each side (peer_report.cpp).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "runner/job_loop.h"
#include "runner/yaml_reader.h"

namespace gpt2::harness {

struct PeerExperiment : ExperimentInfo {
  std::string preset = "original";
  int batch = 16, seq = 0;
  std::vector<int> threads = {1, 2};
  std::vector<int> busy_processes = {0};
  int rounds = 3, steps = 3, warmup = 1;
  double timeout_s = 3600;
  std::string python = "/usr/bin/python3";
  std::vector<std::string> unset_env;
};

// Parses and validates; throws std::invalid_argument naming file:line and the key.
PeerExperiment load_peer_experiment(const std::filesystem::path& file);

// The jobs (one per thread count and number of busy processes); `bench_dir`
// holds train_step, `peer_script` is torch_gpt2.py.
std::vector<Job> peer_jobs(const PeerExperiment& ex, const std::string& build_id, const std::filesystem::path& bench_dir,
                           const std::filesystem::path& peer_script);

// Writes reports/<name>/peer.md and peer.csv from results/<name>; returns them.
std::vector<std::filesystem::path> write_peer_report(const PeerExperiment& ex, const std::filesystem::path& results_dir,
                                                     const std::filesystem::path& reports_dir,
                                                     const std::string& reproduce_command);

}  // namespace gpt2::harness
