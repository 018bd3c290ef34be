// CPU threads as a run asks for them (train.threads, prepare's threads, the
// benchmarks' --threads): bounded, and 0 made the machine's cores.
#pragma once

namespace gpt2 {

// The most threads a count may ask for (train.threads, prepare's threads,
// the benchmarks' --threads): 4 x the cores this machine reports
// (std::thread::hardware_concurrency), and at least 64. More is a mistake
// (65536 threads would exhaust the process's memory or thread limit).
int max_threads();
// `threads` when it is at most max_threads(), else std::invalid_argument
// "<what>: <threads> threads is above the limit of <max> ...".
int check_threads(int threads, const char* what);

// train.threads resolved: 0 is every core; above max_threads() refused
// (std::invalid_argument naming train.threads).
int resolve_threads(int threads);

}  // namespace gpt2
