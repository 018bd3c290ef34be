// Stage runs as Slurm jobs (see slurm.h).
#include "runner/slurm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "runner/process.h"
#include "runner/slurm_options.h"
#include "runner/yaml_reader.h"
#include "util/text.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// The partitions sinfo lists: name (the default's "*" dropped), whether default, and its total CPUs.
struct Partition {
  std::string name;
  bool is_default = false;
  long cpus = 0;
};

std::vector<Partition> partitions() {
  Captured c;
  try {
    c = capture({"sinfo", "-h", "-o", "%P|%C"});
  } catch (const std::exception& e) {
    throw std::invalid_argument(fmt::format("--launcher slurm: sinfo cannot be run: {}", e.what()));
  }
  if (c.status != 0) {
    throw std::invalid_argument(fmt::format("--launcher slurm: Slurm's controller does not answer (sinfo: {}); is "
                                            "Slurm running, and SLURM_CONF set where it needs to be?",
                                            excerpt(trim(c.err), 300)));
  }
  std::vector<Partition> out;
  std::istringstream lines(c.out);
  for (std::string line; std::getline(lines, line);) {
    const size_t bar = line.find('|');
    if (bar == std::string::npos) continue;
    Partition p;
    p.name = line.substr(0, bar);
    if (!p.name.empty() && p.name.back() == '*') {
      p.name.pop_back();
      p.is_default = true;
    }
    // %C: allocated/idle/other/total
    const std::string cpus = line.substr(bar + 1);
    const size_t last = cpus.rfind('/');
    p.cpus = last == std::string::npos ? 0 : std::atol(cpus.c_str() + last + 1);
    // A partition over several node sets is listed once per set: add them.
    auto same = std::find_if(out.begin(), out.end(), [&](const Partition& q) { return q.name == p.name; });
    if (same != out.end()) {
      same->cpus += p.cpus;
    } else {
      out.push_back(p);
    }
  }
  return out;
}

// A single-quoted shell word.
std::string quoted(const std::string& s) { return command_text({s}); }

}  // namespace

std::string slurm_time(double timeout_s) {
  const long minutes = std::max(1L, static_cast<long>(std::ceil(timeout_s / 60.0)));
  return std::to_string(minutes);
}

void check_slurm(const SlurmOptions& opt, const std::vector<RunSpec>& runs) {
  for (const char* tool : {"sbatch", "srun", "sinfo", "scontrol"}) {
    if (find_on_path(tool).empty()) {
      throw std::invalid_argument(fmt::format("--launcher slurm: {} not found on PATH: is Slurm installed here "
                                              "(Debian: slurm-wlm)?", tool));
    }
  }
  if (opt.signal_s < 0) throw std::invalid_argument("--launcher slurm: the signal's warning must be >= 0 seconds");
  const std::vector<Partition> parts = partitions();
  const Partition* p = nullptr;
  for (const Partition& q : parts) {
    if (opt.partition.empty() ? q.is_default : q.name == opt.partition) p = &q;
  }
  if (p == nullptr) {
    std::string names;
    for (const Partition& q : parts) names += (names.empty() ? "" : ", ") + q.name;
    throw std::invalid_argument(opt.partition.empty()
                                    ? fmt::format("--launcher slurm: the cluster has no default partition (its "
                                                  "partitions: {}); name one with --partition", names)
                                    : fmt::format("--launcher slurm: partition {}: no such partition (the cluster's: {})",
                                                  opt.partition, names.empty() ? "none" : names));
  }
  for (const RunSpec& r : runs) {
    const long want = static_cast<long>(r.ranks) * std::max(r.threads, 1);
    if (want > p->cpus) {
      throw std::invalid_argument(fmt::format("--launcher slurm: run {} needs {} CPUs ({} ranks x {} threads), the "
                                              "partition {} has {}", r.id, want, r.ranks, r.threads, p->name,
                                              p->cpus));
    }
  }
}

std::string slurm_job_script(const SlurmOptions& opt, const RunSpec& r, const fs::path& program, const fs::path& dir,
                             const std::vector<std::string>& first_flags, double timeout_s) {
  // Only checked values go into the script: the options again (their readers checked them where they were
  // read), the run's id (a plain word: its folder's name), the output path through sbatch_path, and every
  // word of the shell's lines through command_text's single quotes.
  check_slurm_values(opt);
  if (!is_plain_name(r.id)) throw std::invalid_argument(fmt::format("run id '{}' is not a plain word", excerpt(r.id)));
  std::string s = "#!/bin/bash\n";
  s += fmt::format("# Run {} of the harness (docs/cluster.md): written by harness, submitted with sbatch.\n", r.id);
  s += fmt::format("#SBATCH --job-name=gpt2-{}\n", r.id.substr(0, 40));
  s += fmt::format("#SBATCH --ntasks={}\n#SBATCH --cpus-per-task={}\n", r.ranks, std::max(r.threads, 1));
  // The job's output goes where a local run's does (log.txt, after sbatch's own line), each attempt appended.
  s += fmt::format("#SBATCH --output={}\n#SBATCH --open-mode=append\n", sbatch_path(dir / "log.txt", "the run folder"));
  s += "#SBATCH --requeue\n";
  s += fmt::format("#SBATCH --signal=TERM@{}\n", opt.signal_s);
  s += fmt::format("#SBATCH --time={}\n", opt.time.empty() ? slurm_time(timeout_s) : opt.time);
  if (!opt.partition.empty()) s += fmt::format("#SBATCH --partition={}\n", opt.partition);
  if (!opt.account.empty()) s += fmt::format("#SBATCH --account={}\n", opt.account);
  for (const std::string& line : opt.sbatch) s += fmt::format("#SBATCH {}\n", line);
  s += fmt::format("echo $(( ${{SLURM_RESTART_COUNT:-0}} + 1 )) >> {}\n", quoted((dir / "slurm_attempts").string()));
  // The first attempt starts as the harness decided (fresh, or resuming an earlier attempt's checkpoint); a
  // requeued one continues this job's newest complete checkpoint.
  std::string first;
  for (const std::string& f : first_flags) first += " " + quoted(f);
  s += fmt::format("if [ \"${{SLURM_RESTART_COUNT:-0}}\" = 0 ]; then start=({}); else start=(--resume auto); fi\n",
                   first.empty() ? "" : first.substr(1));
  std::vector<std::string> launcher;
  if (opt.mpiexec) {
    launcher = {"mpiexec", "-n", std::to_string(r.ranks)};
  } else {
    launcher = {"srun", "--mpi=pmi2", "-n", std::to_string(r.ranks)};
  }
  if (r.stage != "mpi" && r.stage != "mpi_cuda") launcher = {"srun", "-n", "1"};
  std::vector<std::string> cmd = launcher;
  cmd.insert(cmd.end(), {program.string(), "train", "--config", (dir / "run.yaml").string(), "--out", dir.string()});
  s += command_text(cmd) + " \"${start[@]}\"\n";
  s += "rc=$?\n";
  s += "# Exit 4: the stage stopped on a signal (a preemption, the time limit's warning) with its checkpoint written.\n";
  // A controller too busy to answer at once gets a few more tries (a failed requeue would end the run).
  s += "if [ $rc = 4 ]; then\n";
  s += "  for try in 1 2 3 4 5; do scontrol requeue \"$SLURM_JOB_ID\" && exit 0; sleep 2; done\n";
  s += "fi\n";
  s += "exit $rc\n";
  return s;
}

std::vector<std::string> slurm_submit_and_wait(const fs::path& job_script, const fs::path& log) {
  // Finished states only, seen twice 2 s apart (a requeue was seen to pass through one): REQUEUED,
  // COMPLETING and PENDING mean another attempt may come. What it writes
  // goes to the end of the log ($2, which the job appends to), never over the job's output.
  static const char* const kScript = R"sh(set -u
out=$(sbatch --parsable "$1") || exit 1
id=${out%%;*}
echo "$id" >> "$2"
misses=0
while :; do
  if ! info=$(scontrol -o show job "$id" 2>&1); then
    misses=$((misses + 1))
    if [ $misses -ge 30 ]; then echo "harness: error: job $id: scontrol show job: $info" >&2; exit 1; fi
    sleep 2
    continue
  fi
  misses=0
  state=$(printf '%s\n' "$info" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  restarts=$(printf '%s\n' "$info" | sed -n 's/.* Restarts=\([0-9]*\).*/\1/p')
  case "$state" in
    COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|PREEMPTED|BOOT_FAIL|DEADLINE|OUT_OF_MEMORY)
      # Ended twice in a row, 2 s apart, with the same restarts: not a requeue passing through.
      if [ "$state $restarts" = "${ended:-}" ]; then break; fi
      ended="$state $restarts"
      sleep 2
      continue ;;
  esac
  ended=""
  sleep 1
done
code=$(printf '%s\n' "$info" | sed -n 's/.* ExitCode=\([0-9]*\):\([0-9]*\).*/\1 \2/p')
echo "harness: job $id ended: $(printf '%s\n' "$info" | grep -o 'JobState=[^ ]* Reason=[^ ]*\|Restarts=[^ ]*\| ExitCode=[^ ]*' | tr -s '\n ' ' ')" >> "$2"
set -- $code
if [ "${2:-0}" != 0 ]; then exit $((128 + $2)); fi
exit "${1:-1}"
)sh";
  return {"bash", "-c", kScript, "harness-slurm-wait", job_script.string(), log.string()};
}

int slurm_stage_status(const fs::path& log, int rc) {
  std::ifstream f(log);
  const std::string mark = "application called MPI_Abort(";
  int status = rc;
  for (std::string line; std::getline(f, line);) {
    const size_t at = line.find(mark);
    if (at == std::string::npos) continue;
    const size_t comma = line.find(',', at), close = line.find(')', at);
    if (comma != std::string::npos && close != std::string::npos && comma < close) {
      status = std::atoi(line.c_str() + comma + 1);  // the last abort in the log: this attempt's
    }
  }
  return status;
}

std::string slurm_program_error(const fs::path& log) {
  std::ifstream f(log);
  std::string found;
  for (std::string line; std::getline(f, line);) {
    if (line.find("error:") == std::string::npos) continue;
    if (line.starts_with("srun:") || line.starts_with("slurmstepd")) continue;
    found = line;
  }
  return found;
}

void slurm_cancel(const fs::path& log) {
  std::ifstream f(log);
  std::string first;
  std::getline(f, first);
  const std::string id = first.substr(0, first.find(';'));  // "<id>[;<cluster>]"
  if (id.empty() || !std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; })) return;
  try {
    (void)capture({"scancel", id});
  } catch (const std::exception&) {
    // Nothing more to do: the job's own time limit ends it.
  }
}

int slurm_attempts(const fs::path& dir) {
  std::ifstream f(dir / "slurm_attempts");
  int n = 0;
  for (std::string line; std::getline(f, line);) {
    if (!line.empty()) ++n;
  }
  return n;
}

}  // namespace gpt2::harness
