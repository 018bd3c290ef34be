// The Slurm options of a stages experiment (its `slurm:` section, and the
// command line's --partition, --account, --time, --sbatch) and what Slurm
// accepts of each (docs/cluster.md "What a job script takes"). They are
// written into job scripts (runner/slurm.h), which an experiment file
// someone sent could otherwise turn into commands run on the user's
// cluster account: a newline in an #SBATCH line starts a line the shell
// runs. So every value is checked where it is read, before any work, and
// refused unless it is in the form Slurm takes and made of characters that
// neither sbatch's reading of #SBATCH lines nor the shell treats specially;
// nothing is quoted into the script that was not checked. The job script's
// writer checks them again, so a value no caller checked never reaches it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace gpt2::harness {

// How each run becomes a Slurm job (runner/slurm.h): the experiment's
// `slurm:` section, over which the command line's options go.
struct SlurmOptions {
  std::string partition, account;   // "": the cluster's defaults
  std::string time;                 // sbatch --time ("30", "2:00:00"); "": from the experiment's timeout_s
  std::vector<std::string> sbatch;  // further sbatch options, each one "#SBATCH" line ("--qos=low")
  bool mpiexec = false;             // start the ranks with mpiexec inside the allocation, not srun --mpi=pmi2
  int signal_s = 60;                // --signal=TERM@N: the warning before the time limit
};

// Each returns "" for a value a job script may carry, else why not, with
// the value quoted through excerpt() (at most 80 characters, control bytes
// escaped); the caller puts the key or option in front of it.
//   partition, account: one name of letters, digits, '_', '-' and '.', not
//     starting with '.' or '-', at most 100 characters (`what`: "a partition");
//   time: sbatch --time's forms: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM,
//     D-HH:MM:SS (each number at most 9 digits), UNLIMITED or INFINITE;
//   an sbatch option: --name, --name=value, --name value, -X or -X value,
//     whose name is one of sbatch's own (whole: getopt_long would take an
//     abbreviation of another), not one the job script sets itself or one
//     that runs a command, sets the job's environment or user, or changes
//     how the job is submitted and waited for, and whose value holds only
//     letters, digits and _ . , : = @ % / + -.
std::string slurm_name_problem(const std::string& value, const std::string& what);
std::string slurm_time_problem(const std::string& value);
std::string sbatch_option_problem(const std::string& option);

// All of `o`'s values, named as the command line names them: throws
// std::invalid_argument "--partition: <problem>" (--account, --time,
// --sbatch) at the first one refused.
void check_slurm_values(const SlurmOptions& o);

// A path (the job's output file) as one word of an #SBATCH line that sbatch
// reads back as the path itself, and as a Slurm file name pattern naming
// exactly that file ('%' doubled): double-quoted, with '"', '\'' and
// '#' escaped for sbatch's reading of the line. Throws
// std::invalid_argument "<what>: '<path>' ..." for what no #SBATCH line can
// carry: a control byte (a newline would end the line) or a backslash
// (which turns Slurm's file name patterns off and is dropped).
std::string sbatch_path(const std::filesystem::path& path, const std::string& what);

}  // namespace gpt2::harness
