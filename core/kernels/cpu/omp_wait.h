// How long the CPU backend's OpenMP threads spin before they sleep, when
// they wait for each other at the end of a parallel region or for the next.
//
// libgomp's default (OMP_WAIT_POLICY unset) spins up to 300,000 times (tens
// of milliseconds on the development VM, where a spin costs ~100 ns) before
// sleeping.
// A training step is many short parallel regions (73 for the `small` preset),
// so when another process wants a core, the thread that arrives first spins
// away the time slice that its partner (or the other process) needs: one
// busy process made a small model's 2-thread step 6.5x slower. Sleeping at
// once (OMP_WAIT_POLICY=passive) fixes that but pays a wake-up on every
// region when the machine is idle, 10-20% of a 20 ms step here. A short spin,
// GOMP_SPINCOUNT=300 (tens of microseconds), covers the gap between two
// regions of an idle machine and gives the core away soon under load:
// docs/benchmarks.md, "Contention", has the measurements.
//
// libgomp reads its environment when it is loaded, before main(), so the
// setting cannot be made from inside the running program:
// set_omp_wait_policy() sets the variable and executes the program again
// (same arguments, same process id). A policy the user chose
// (OMP_WAIT_POLICY or GOMP_SPINCOUNT set) is left alone.
#pragma once

#include <string>

namespace gpt2::cpu {

// Call first thing in main(): before MPI_Init (the re-executed program must
// be the one that joins the job) and before anything worth keeping is done.
// Returns only when nothing needs changing or the re-execution failed (then
// the program runs with libgomp's default, and omp_wait_policy() says so).
void set_omp_wait_policy(char** argv);

// The policy this process runs with, for provenance: "GOMP_SPINCOUNT=300
// (engine)", "OMP_WAIT_POLICY=passive (environment)" or "libgomp default".
std::string omp_wait_policy();

}  // namespace gpt2::cpu
