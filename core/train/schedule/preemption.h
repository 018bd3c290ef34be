// Preemption (issue 43; docs/guarantees.md "Signals and preemption"):
// SIGTERM (Slurm's preemption and time limit; mpiexec passes it on to the
// ranks), SIGINT (Ctrl-C) and SIGUSR1 (an early warning a job asks for, as
// `sbatch --signal=USR1@90`) ask a training run to stop. The first such
// signal sets a flag and nothing else; the ranks agree on it at the next
// step boundary, or at a stop point inside the step (agreed_stop,
// StepInterrupt), write a training checkpoint, record the stop in the
// metrics stream and exit with kExitPreempted. A second signal ends the
// process at once with that signal's default action (exit status 128 + its
// number), losing only a checkpoint still being written: a checkpoint counts
// only once its COMPLETE marker is written (train/formats/checkpoint_store.h), so
// the one before stays whole.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "parallel/comm.h"

namespace gpt2 {

// The exit status of a run that stopped for a signal after writing its
// checkpoint: resume it with --resume.
inline constexpr int kExitPreempted = 4;

// Installs the handlers of SIGTERM, SIGINT and SIGUSR1 (idempotent).
void install_stop_handlers();
// The number of the first stop signal this process received, or 0.
int stop_signal();
// When it arrived, in steady-clock nanoseconds (0: none).
int64_t stop_signal_ns();
// "SIGTERM", "SIGINT", "SIGUSR1", or "signal N".
std::string signal_name(int sig);

// What the ranks agreed: the largest stop signal number any rank received
// (0: none), the longest any rank has waited since its signal, and the
// longest step any rank reported.
struct StopRequest {
  int signal = 0;
  double waited_s = 0;
  double step_s = 0;
};
// Collective over `comm` (every rank, at the same step boundary or stop
// point), so that every rank stops at the same place. `step_s`: this rank's
// last step, in seconds (0 inside a step).
StopRequest agreed_stop(Communicator& comm, double step_s = 0);

// Asked at a step's stop points (between micro-steps, or a pipeline's
// actions, where StepSpec::stop_in_step says so): true abandons the step,
// so a long step need not finish before a run stops. Collective over the
// ranks that run the step.
class StepInterrupt {
 public:
  virtual ~StepInterrupt() = default;
  virtual bool stop_now() = 0;
};

// Thrown by a step function that abandoned its step (StepInterrupt): no
// parameter or moment was changed; the gradients are partial and unused.
class StepAbandoned : public std::runtime_error {
 public:
  StepAbandoned() : std::runtime_error("the step was abandoned for a stop signal") {}
};

// Thrown by a run that stopped for a signal once its checkpoint is written
// (every rank throws it); the stage exits with kExitPreempted.
class RunPreempted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace gpt2
