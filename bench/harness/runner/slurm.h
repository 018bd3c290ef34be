// Stage runs as Slurm jobs (harness run --launcher slurm, harness
// slurm-script; docs/cluster.md). Each run is one batch job whose script
// starts the stage's ranks (srun --mpi=pmi2, or mpiexec inside the
// allocation), asks for a TERM before its time limit (--signal), and, when
// the stage stops on a signal with its checkpoint written (exit 4), puts
// itself back in the queue (scontrol requeue), whose next attempt resumes
// (--resume auto). The harness submits it and waits for the job's end
// through a small script (slurm_submit_and_wait), so the job is a process
// it waits for like a local run: the same progress, timeouts, statuses,
// reuse and runs.csv.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "runner/experiment.h"

namespace gpt2::harness {

// SlurmOptions and the checks of its values: runner/slurm_options.h.

// Before anything is submitted (std::invalid_argument, exit 2, nothing
// submitted): sbatch, srun and sinfo on PATH, the controller answering, the
// partition existing, and every run's ranks x threads no more than the
// partition's CPUs.
void check_slurm(const SlurmOptions& opt, const std::vector<RunSpec>& runs);

// The job script of run `r`: its #SBATCH lines (job name, tasks, CPUs per
// task, output, --requeue, --signal, time, partition, account, the extra
// lines), then the attempt's count appended to DIR/slurm_attempts, the
// stage (fresh or resuming as `first_flags` says on the first attempt,
// --resume auto on a requeued one) and the requeue on exit 4.
std::string slurm_job_script(const SlurmOptions& opt, const RunSpec& r, const std::filesystem::path& program,
                             const std::filesystem::path& dir, const std::vector<std::string>& first_flags,
                             double timeout_s);

// The command that submits `job_script` (sbatch --parsable; the job id is
// the first line it appends to `log`, the job's output file) and waits until the job has ended for good,
// polling `scontrol show job` once a second: a job on its way back to the
// queue after `scontrol requeue` shows REQUEUED or COMPLETING, then
// PENDING, and for a moment may show an ended state (sbatch --wait was seen
// to return there, with the first attempt's status), so an ended state
// counts once it is seen twice, 2 s apart, with the same restart count. Exits with the job's status as sbatch --wait
// would: its exit code, or 128 + the signal that ended it; its last line
// in the log names the job's final state, restarts and exit code.
std::vector<std::string> slurm_submit_and_wait(const std::filesystem::path& job_script,
                                               const std::filesystem::path& log);

// The attempts Slurm made of the job in `dir` (lines of DIR/slurm_attempts; 0 when none).
int slurm_attempts(const std::filesystem::path& dir);

// What a job's log (the stage's output and srun's) says of the stage when
// the job did not end well: srun reports a step it killed because a rank
// called MPI_Abort (MPICH's "application called MPI_Abort(..., N)"), and
// the status N is the rank's own (3: this machine lacks what the program
// needs; 2: bad input); and the program's last error line, not srun's or
// slurmstepd's. `rc` when the log names no abort; "" when no program line.
int slurm_stage_status(const std::filesystem::path& log, int rc);
std::string slurm_program_error(const std::filesystem::path& log);

// Cancels the job whose id `sbatch --parsable` wrote as the log's first
// line (the harness's timeout ended the wait, not the job). Does
// nothing when the log names no job.
void slurm_cancel(const std::filesystem::path& log);

// sbatch's --time for a timeout: whole minutes, at least one.
std::string slurm_time(double timeout_s);

}  // namespace gpt2::harness
