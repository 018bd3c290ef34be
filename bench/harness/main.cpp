// harness: runs YAML experiments and turns what they recorded into tidy CSV
// results and Markdown reports. Four kinds of experiment, one run loop
// (job_loop.h): stage runs (`kind: stages`, the default), the kernel
// microbenchmarks (`kind: kernels`), our training step against PyTorch
// (`kind: peer`) and the MPI stage's step with and without bucketed
// allreduce (`kind: mpi_step`).
//   harness run EXPERIMENT.yaml [--force] [--quiet] [--set KEY=VALUE,...] [--results DIR] [--reports DIR] [--build DIR]
//   harness report EXPERIMENT   [--results DIR] [--reports DIR] [--build DIR]
//   harness list                [--experiments DIR] [--build DIR]
//   harness reindex NAME        [--results DIR]
// The harness links none of the engine: it starts the stage and benchmark
// programs as processes and reads what they write (util/records.h).
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "records/tables.h"
#include "reports/compare.h"
#include "reports/kernels_report.h"
#include "reports/report.h"
#include "runner/calibrate.h"
#include "runner/experiment.h"
#include "runner/job_loop.h"
#include "runner/kernels_experiment.h"
#include "runner/mpi_step_experiment.h"
#include "runner/peer_experiment.h"
#include "runner/process.h"
#include "runner/progress.h"
#include "runner/slurm.h"
#include "runner/slurm_options.h"
#include "runner/stage_runner.h"
#include "runner/yaml_reader.h"
#include "util/console.h"
#include "util/fields.h"
#include "util/files.h"
#include "util/provenance.h"
#include "util/text.h"

namespace fs = std::filesystem;
using namespace gpt2::harness;
namespace console = gpt2::console;

namespace {

const char* kHelp = R"(harness: run experiments over the GPT-2 stages and report them.

usage:
  harness run EXPERIMENT.yaml [--force] [--retries N] [--quiet] [--set KEY=VALUE,...] [--results DIR] [--reports DIR]
             [--build DIR] [--launcher local|slurm [SLURM OPTIONS]] [--machine FILE]
      Runs every job of the experiment (reusing completed ones unless --force),
      continuing a training run that was interrupted, preempted or failed from
      its checkpoint (--resume auto), and up to N more times (--retries N),
      writes DIR/<experiment>/<job-id>/ for each and the experiment's index
      (runs.csv and loss.csv, programs.csv or jobs.csv), then the reports.
      While a stage trains, a progress line follows its metrics stream (step,
      loss, tokens/s, time left): rewritten in place on a terminal, one line
      per run otherwise; --quiet prints none.
      Exit status: 0 all jobs ok or skipped, 1 a job failed or was preempted, 2 bad input
      (nothing is run). --set overrides a configuration key in every run of a
      stages experiment (after the experiment's own settings); an experiment
      whose `needs:` names a key not set this way is skipped, and its report
      says what to pass (experiments/table2_original.yaml: data.corpus).
      --machine FILE: every run's plan.json gains the step-time model's
      prediction, runs.csv predicted_step_ms and prediction_error, and the
      runs whose prediction misses by more than 15% are named at the end
      (docs/prediction.md).
      --launcher slurm (stages experiments): each run one Slurm batch job,
      submitted and waited for to its end (its ranks and threads as tasks and CPUs
      per task, --requeue, --signal=TERM@60, --time from timeout_s); a stage
      stopped by a signal saves, the job requeues itself and its next attempt
      resumes; runs.csv counts the attempts (docs/cluster.md). Checked before
      anything is submitted: Slurm installed and answering, the partition,
      every run's CPUs. SLURM OPTIONS: --partition P, --account A, --time T
      (sbatch's), --sbatch=OPT,... (more #SBATCH lines), --slurm-ranks
      srun|mpiexec (srun --mpi=pmi2, the default, or mpiexec inside the job);
      each value, here or in the experiment's `slurm:`, checked against what
      Slurm accepts before any work (docs/cluster.md).
  harness slurm-script EXPERIMENT --out DIR [SLURM OPTIONS]
      Writes each run's job script (DIR/<run-id>/job.sh, with run.yaml and
      plan.json beside it; the run writes there) and DIR/submit_all.sh, for
      users who submit themselves; nothing is submitted. DIR: new or empty, in
      an existing folder, not in a training run's folder.
  harness report EXPERIMENT [--results DIR] [--reports DIR] [--build DIR]
      Rebuilds the reports from stored results (no run). EXPERIMENT is a file
      or a name in experiments/.
  harness compare A B [--metric training_s] [--out DIR [--overwrite]] [--results DIR]
      Matches two result sets of stage runs configuration by configuration:
      medians of the metric (a runs.csv column: training_s, step_ms,
      inference_s, tokens_per_s, final_loss, val_loss), the ratio B / A and
      a two-sided Mann-Whitney U test over the repetitions, warning as
      google/benchmark's compare.py does when there are fewer than 9. A and
      B: a folder with runs.csv, an experiment name (results/NAME), or
      REV:NAME (that experiment's runs.csv at git revision REV). Markdown on
      stdout; --out also writes compare.md and compare.csv in a new or empty
      folder (an existing one only with --overwrite; never a side's folder).
  harness list [--experiments DIR] [--build DIR]
      The experiments, and which stages this machine can run (and why not).
  harness reindex NAME [--results DIR]
      Rebuilds a stages experiment's stored runs.csv and loss.csv from the run
      folders its runs.csv lists (each folder's status, metrics stream and
      plan.json), after a change to what a row holds; rows of folders not
      kept stay as they were. NAME: a folder of DIR (results/), or a path to
      a folder with runs.csv. Runs nothing; `report` then rebuilds the reports.
  harness calibrate --out FILE [--overwrite] [--name TEXT] [--threads 1,2] [--shapes small,original]
                    [--repetitions N] [--build DIR]
      Measures this machine for the step-time model (docs/prediction.md) and
      writes its machine file: every kernel of our CPU backend at the shapes'
      sizes and thread counts (<build>/bench/kernel_bench, the median of N
      repetitions), the node's link from the gradient allreduce at 2 and 4
      ranks (<build>/bench/allreduce_bench under mpiexec), the SGEMM ceiling.
      Read by `<stage> plan --machine FILE`. About 8 minutes on 2 cores.
  harness [COMMAND] --help

Kinds of experiment (`kind:` in the file):
  stages    (default) training runs of the stage programs: reports table1,
            table2, scaling, tensor_parallel, parallelism, table2_original,
            ablation
  kernels   the kernel microbenchmark programs of <build>/bench: kernels.md
            with a roofline chart
  peer      our training step (<build>/bench/train_step) against PyTorch
            (bench/peers/torch_gpt2.py), alternating: peer.md
  mpi_step  the MPI stage's step with and without bucketed allreduce: mpi_step.md
Run configurations are resolved and checked by <build>/stages/serial config
(every stage shares its configuration schema), so the serial program must be
built.

defaults: --results <repo>/results, --reports <repo>/reports, --experiments
<repo>/experiments, --build: the build this harness belongs to; <repo> is the
parent of the experiment file's directory (or of this build).
)";

// Up to the first ". " (a period inside a name such as backend.h does not end it).
std::string first_sentence(const std::string& text) {
  const size_t end = text.find(". ");
  return end == std::string::npos ? text : text.substr(0, end + 1);
}

fs::path self_dir() { return fs::canonical("/proc/self/exe").parent_path(); }
// build/bench/harness -> build; the repository root is recorded at configure time.
fs::path default_build() { return self_dir().parent_path(); }

// The command line: COMMAND [EXPERIMENT] and the options of a field list
// (util/fields.h), so an unknown option gets a "did you mean".
struct Args {
  std::string command, target, second;  // second: compare's B
  std::string metric = "training_s", out;
  std::string results, reports, build, experiments;  // "" = the default
  std::vector<std::string> set;                       // --set KEY=VALUE,...
  bool force = false;
  int retries = 0;         // run: more attempts of a failed or preempted training run, each resuming the last
  bool overwrite = false;  // compare: --out may be an existing folder
  bool quiet = false;
  bool help = false;
  std::string launcher;  // run: local | slurm; "": the experiment's `launcher:` (else local)
  SlurmOptions slurm;
  std::string slurm_ranks = "srun";  // --slurm-ranks
  // calibrate
  std::string name, shapes = "small,original";
  std::vector<int> threads = {1, 2};
  int repetitions = 3;
  bool quick = false;
  std::string machine;  // run: a machine file for the step-time model
};

Args parse(int argc, char** argv) {
  Args a;
  gpt2::Fields f;
  f.add("force", a.force, "rerun completed jobs");
  f.add("retries", a.retries, "run: attempt a failed or preempted training run up to N more times, each resuming "
        "the last one's checkpoint (0-100)", "N");
  f.add("quiet", a.quiet, "no live progress line while a run trains");
  f.add("results", a.results, "results folder", "path");
  f.add("reports", a.reports, "reports folder", "path");
  f.add("build", a.build, "the build whose programs run", "path");
  f.add("experiments", a.experiments, "the folder `list` reads", "path");
  f.add("metric", a.metric, "compare: the runs.csv column to compare (training_s, step_ms, ...)", "name");
  f.add("out", a.out, "compare: also write compare.md and compare.csv in this folder; slurm-script: the folder of "
        "the job scripts", "path");
  f.add("overwrite", a.overwrite, "compare: replace compare.md and compare.csv in an existing --out folder");
  f.add("set", a.set, "KEY=VALUE[,KEY=VALUE...] set in every run of a stages experiment (after its own settings)",
        "list");
  f.add("launcher", a.launcher, "run: local (the stage programs here) or slurm (each run a batch job)", "name");
  f.add("partition", a.slurm.partition, "slurm: the partition (default: the cluster's default)", "name");
  f.add("account", a.slurm.account, "slurm: the account to charge", "name");
  f.add("time", a.slurm.time, "slurm: each job's time limit, as sbatch --time takes it (default: from timeout_s)",
        "time");
  f.add("sbatch", a.slurm.sbatch, "slurm: more sbatch options, one #SBATCH line each (e.g. --qos=low)", "list");
  f.add("slurm-ranks", a.slurm_ranks, "slurm: how a job starts its ranks: srun (--mpi=pmi2) or mpiexec", "name");
  f.add("name", a.name, "calibrate: the machine's name in the file (default: its CPU and cores)", "text");
  f.add("threads", a.threads, "calibrate: the thread counts to time the kernels at (default 1,2)", "list");
  f.add("shapes", a.shapes,
        "calibrate: kernel_bench's shapes, and allreduce_bench's gradients (default small,original)", "list");
  f.add("repetitions", a.repetitions, "calibrate: repetitions of each benchmark, their median kept (1-100)", "N");
  f.add("machine", a.machine,
        "run: a machine file (docs/prediction.md): each run's plan gains its predicted "
        "step; runs.csv predicted_step_ms and prediction_error; runs past 15% named at the end",
        "path");
  f.add("quick", a.quick, "calibrate: the benchmarks' --quick (tiny shape, meaningless figures): for tests");
  const gpt2::CommandLine cl = gpt2::parse_command_line({argv + 1, argv + argc}, f);
  gpt2::apply_settings(f, cl);
  a.help = cl.help;
  const size_t most = !cl.positional.empty() && cl.positional[0] == "compare" ? 3 : 2;
  if (cl.positional.size() > most) {
    throw std::invalid_argument(fmt::format("unexpected argument '{}'", cl.positional[most]));
  }
  if (!cl.positional.empty()) a.command = cl.positional[0];
  if (cl.positional.size() > 1) a.target = cl.positional[1];
  if (cl.positional.size() > 2) a.second = cl.positional[2];
  return a;
}

fs::path opt_path(const std::string& given, const fs::path& dflt) {
  return given.empty() ? dflt : fs::absolute(given);
}

// A folder option (--results, --reports) checked before any work: bad input,
// exit 2, instead of a filesystem error (exit 1) once runs have started.
// Where it exists it must be a folder (through a link is fine), and
// writable when the command writes there (`write`); where it does not, the
// nearest folder above it that exists must be one, writable, so the harness
// can create it. Nothing is created or written here.
void check_folder_option(const std::string& option, const fs::path& dir, bool write) {
  const auto refuse = [&](const std::string& why) {
    throw std::invalid_argument(fmt::format("{}: '{}' {}", option, gpt2::excerpt(dir.string(), 200), why));
  };
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) refuse("is not a folder; name a folder (it is created if missing)");
    if (write && ::access(dir.c_str(), W_OK | X_OK) != 0) {
      refuse(fmt::format("is not writable ({}); name a folder this user can write", std::strerror(errno)));
    }
    return;
  }
  if (errno == ENOTDIR) refuse("cannot be a folder: a part of the path above it is a file");
  if (errno != ENOENT) refuse(fmt::format("cannot be used: {}", std::strerror(errno)));
  if (!write) return;  // read only: a missing folder is "no results", said where it is read
  fs::path above = dir.parent_path();
  if (above.empty()) above = ".";
  while (!above.empty() && ::stat(above.c_str(), &st) != 0) {
    if (errno == ENOTDIR) refuse("cannot be created: a part of the path above it is a file");
    if (above == above.parent_path()) break;
    above = above.parent_path();
  }
  if (!S_ISDIR(st.st_mode)) refuse(fmt::format("cannot be created: '{}' is not a folder", above.string()));
  if (::access(above.c_str(), W_OK | X_OK) != 0) {
    refuse(fmt::format("cannot be created in '{}' ({})", above.string(), std::strerror(errno)));
  }
}

// An experiment given by file or by name (experiments/<name>.yaml).
fs::path experiment_file(const std::string& target, const fs::path& experiments_dir) {
  if (fs::is_regular_file(target)) return fs::absolute(target);
  const fs::path named = experiments_dir / (target + ".yaml");
  if (fs::is_regular_file(named)) return named;
  throw std::invalid_argument(fmt::format("no experiment '{}' (neither a file nor {})", target, named.string()));
}

// Where an experiment's programs, results and reports are.
struct Places {
  fs::path build, results, reports, repo;
  std::string build_id;
  int retries = 0;  // --retries
  std::string launcher;   // --launcher ("": the experiment's)
  SlurmOptions slurm;     // the command line's Slurm options, over an experiment's `slurm:`
  bool slurm_mpiexec = false;  // --slurm-ranks mpiexec given
  bool slurm_options() const {
    return !slurm.partition.empty() || !slurm.account.empty() || !slurm.time.empty() || !slurm.sbatch.empty() ||
           slurm_mpiexec;
  }
};

// The launcher of a stages experiment's runs: the command line's, else the
// experiment's; under Slurm its options with the command line's over them.
std::optional<SlurmOptions> slurm_of(const Experiment& ex, const Places& at) {
  const std::string launcher = at.launcher.empty() ? ex.launcher : at.launcher;
  if (launcher != "slurm" && at.slurm_options()) {
    throw std::invalid_argument(fmt::format("--partition, --account, --time, --sbatch and --slurm-ranks go with the "
                                            "Slurm launcher; {} runs locally (add --launcher slurm)", ex.name));
  }
  if (launcher != "slurm") return std::nullopt;
  SlurmOptions o = ex.slurm;
  if (!at.slurm.partition.empty()) o.partition = at.slurm.partition;
  if (!at.slurm.account.empty()) o.account = at.slurm.account;
  if (!at.slurm.time.empty()) o.time = at.slurm.time;
  o.sbatch.insert(o.sbatch.end(), at.slurm.sbatch.begin(), at.slurm.sbatch.end());
  if (at.slurm_mpiexec) o.mpiexec = true;
  return o;
}

// An experiment of any kind, loaded and validated: what list, run and report need of it.
struct Loaded {
  std::string name, description, count;  // count: "5 runs", "2 benchmark programs"
  std::string index;                      // the file `report` needs in <results>/<name>
  std::function<int(bool force)> run;     // runs the jobs; returns the number that failed
  std::function<std::vector<fs::path>(const std::string& reproduce_command)> report;
};

Loaded load(const fs::path& file, const Places& at, ConfigResolver& resolver, const std::vector<std::string>& set = {}) {
  const std::string kind = experiment_kind(file);
  Loaded l;
  if (kind != "stages" && at.launcher == "slurm") {
    throw std::invalid_argument(fmt::format("--launcher slurm: only stages experiments run as Slurm jobs ({} is kind "
                                            "{})", file.string(), kind));
  }
  if (kind != "stages" && !set.empty()) {
    throw std::invalid_argument(fmt::format("--set: only stages experiments take overrides ({} is kind {})",
                                            file.string(), kind));
  }
  if (kind == "stages") {
    auto ex = std::make_shared<Experiment>(load_experiment(file, at.build_id, resolver, set));
    const std::string count =
        ex->skip_reason.empty() ? fmt::format("{:>3} runs", ex->runs.size()) : "skipped";
    l = Loaded{ex->name, ex->description, count, "runs.csv",
               [ex, at](bool force) {
                 if (!ex->skip_reason.empty()) {
                   console::err(fmt::format("{}: skipped: this experiment {}\n", ex->name, ex->skip_reason));
                   return 0;
                 }
                 return run_experiment(*ex, RunnerOptions{child_of(at.results, ex->name), at.build / "stages", force,
                                                          at.retries, slurm_of(*ex, at)});
               },
               [ex, at](const std::string& cmd) {
                 ReportSpec spec{ex->name, ex->description, ex->reports, child_of(at.results, ex->name),
                                 child_of(at.reports, ex->name), at.repo / "data" / "paper", cmd, ""};
                 // Skipped now, but results stored earlier (with the key given) still make the report.
                 if (!fs::exists(child_of(at.results, ex->name) / "runs.csv")) spec.skip_reason = ex->skip_reason;
                 return write_reports(spec);
               }};
  } else if (kind == "kernels") {
    auto ex = std::make_shared<KernelsExperiment>(load_kernels_experiment(file, at.build_id));
    l = Loaded{ex->name, ex->description, fmt::format("{:>3} benchmark programs", ex->programs.size()), kKernelsIndex,
               [ex, at](bool force) {
                 return run_indexed_jobs(kernels_jobs(*ex, at.build / "bench"), child_of(at.results, ex->name), force,
                                         programs_identity(at.build / "bench"), kKernelsIndex, "program");
               },
               [ex, at](const std::string& cmd) {
                 return write_kernels_report(*ex, child_of(at.results, ex->name), child_of(at.reports, ex->name), cmd);
               }};
  } else if (kind == "peer") {
    auto ex = std::make_shared<PeerExperiment>(load_peer_experiment(file));
    l = Loaded{ex->name, ex->description, fmt::format("{:>3} peer jobs", ex->threads.size() * ex->busy_processes.size()), kJobsIndex,
               [ex, at](bool force) {
                 const fs::path script = fs::path(kRepoRoot) / "bench" / "peers" / "torch_gpt2.py";
                 return run_indexed_jobs(peer_jobs(*ex, at.build_id, at.build / "bench", script),
                                         child_of(at.results, ex->name), force, programs_identity(at.build / "bench"),
                                         kJobsIndex, "job");
               },
               [ex, at](const std::string& cmd) {
                 return write_peer_report(*ex, child_of(at.results, ex->name), child_of(at.reports, ex->name), cmd);
               }};
  } else {
    auto ex = std::make_shared<MpiStepExperiment>(load_mpi_step_experiment(file, resolver));
    l = Loaded{ex->name, ex->description, fmt::format("{:>3} MPI jobs", ex->jobs.size()), kJobsIndex,
               [ex, at](bool force) {
                 return run_indexed_jobs(mpi_step_jobs(*ex, at.build_id, at.build / "stages"), child_of(at.results, ex->name),
                                         force, programs_identity(at.build / "stages"), kJobsIndex, "job");
               },
               [ex, at](const std::string& cmd) {
                 return write_mpi_step_report(*ex, child_of(at.results, ex->name), child_of(at.reports, ex->name), cmd);
               }};
  }
  return l;
}

int list(const Args& a, const Places& at, ConfigResolver& resolver) {
  const fs::path exps = opt_path(a.experiments, fs::path(kRepoRoot) / "experiments");
  fmt::print("experiments in {}:\n", exps.string());
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(exps)) {
    if (e.path().extension() == ".yaml") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    try {
      const Loaded l = load(f, at, resolver);
      fmt::print("  {:<10} {}  {}\n", l.name, l.count, first_sentence(l.description));
    } catch (const std::invalid_argument& e) {
      fmt::print("  {:<10} invalid: {}\n", f.stem().string(), e.what());
    }
  }
  const fs::path stages = at.build / "stages";
  fmt::print("stages in {}:\n", stages.string());
  for (const std::string& s : kStages) {
    const Availability av = stage_availability(s, stages);
    fmt::print("  {:<9} {}\n", s, av.available ? "available" : "unavailable: " + av.reason);
  }
  return 0;
}

int reindex(const Args& a) {
  if (a.target.empty()) throw std::invalid_argument("reindex: which results? (a name in results/, or a folder)");
  if (!a.results.empty()) check_folder_option("--results", fs::absolute(a.results), false);
  fs::path dir = a.target;
  if (!fs::exists(dir / "runs.csv")) dir = opt_path(a.results, fs::path(kRepoRoot) / "results") / a.target;
  if (!fs::exists(dir / "runs.csv")) {
    throw std::invalid_argument(fmt::format("reindex: '{}' is not a stages experiment's results (no runs.csv in {})",
                                            a.target, dir.string()));
  }
  const int rebuilt = reindex_results(dir);
  console::err(fmt::format("{}: {} rows rebuilt from their run folders\n", (dir / "runs.csv").string(), rebuilt));
  return 0;
}

// harness slurm-script: each run's job script, configuration and plan in DIR/<run-id>/, and DIR/submit_all.sh.
int slurm_script(const Args& a, Places& at, ConfigResolver& resolver) {
  if (a.target.empty()) throw std::invalid_argument("slurm-script: which experiment? (see harness --help)");
  if (a.out.empty()) throw std::invalid_argument("slurm-script: --out DIR (a new or empty folder) is needed");
  const fs::path file = experiment_file(a.target, fs::path(kRepoRoot) / "experiments");
  if (experiment_kind(file) != "stages") {
    throw std::invalid_argument(fmt::format("slurm-script: {} is not a stages experiment", file.string()));
  }
  // Before the experiment is resolved: the rules every writing command follows (a new or empty folder, not the
  // experiment file, not in a training run's folder or a locked one), and a path the job scripts' #SBATCH
  // --output can carry.
  const fs::path out = fs::absolute(a.out);
  std::error_code ec;
  if (fs::is_directory(out, ec) && !fs::is_empty(out, ec)) {  // said as before: slurm-script takes no --overwrite
    throw std::invalid_argument(fmt::format("--out: '{}' is not empty (slurm-script writes only a new or empty "
                                            "folder)", gpt2::excerpt(out.string(), 200)));
  }
  check_output(out, gpt2::OutputRules{"--out", {file}, false, true});
  (void)sbatch_path(out, "--out");
  const Experiment ex = load_experiment(file, at.build_id, resolver, a.set);
  Places under_slurm = at;
  under_slurm.launcher = "slurm";  // the scripts are Slurm's, whatever the experiment's launcher
  const SlurmOptions options = *slurm_of(ex, under_slurm);
  const fs::path stages = at.build / "stages";
  std::string submit = "#!/bin/bash\n# Submits every run of " + ex.name + " (written by harness slurm-script).\nset -e\n";
  int written = 0;
  for (const RunSpec& r : ex.runs) {
    const Availability av = stage_availability(r.stage, stages);
    if (!av.available) {
      console::err(fmt::format("{}: not written: {}\n", r.id, av.reason));
      continue;
    }
    const fs::path dir = child_of(out, r.id);
    fs::create_directories(dir);
    gpt2::write_file_atomically(dir / "run.yaml", r.config);
    gpt2::write_file_atomically(dir / "plan.json", r.plan);
    gpt2::write_file_atomically(dir / "job.sh", slurm_job_script(options, r, av.program, dir, {"--overwrite"},
                                                            ex.timeout_s));
    submit += command_text({"sbatch", (dir / "job.sh").string()}) + "\n";
    ++written;
  }
  fs::create_directories(out);  // the folder exists when no run could be written, too
  gpt2::write_file_atomically(out / "submit_all.sh", submit);
  console::err(fmt::format("{}: {} job scripts in {}; submit them with: {}\n", ex.name, written, out.string(),
                           command_text({"bash", (out / "submit_all.sh").string()})));
  return 0;
}

// harness run --machine FILE: every run's plan carries the step-time model's prediction (docs/prediction.md).
void use_machine(const Args& a, ConfigResolver& resolver) {
  if (a.machine.empty()) return;
  if (a.command != "run") throw std::invalid_argument("--machine: only with run (its plans carry the prediction)");
  const fs::path machine = fs::absolute(a.machine);
  (void)gpt2::read_input_file(machine, gpt2::kMaxTextInputBytes, "--machine", "a machine file (machines/*.yaml)");
  resolver.set_machine(machine);  // the stage program checks its contents with the first plan
}

// harness calibrate: this machine's machine file (runner/calibrate.h).
int calibrate_command(const Args& a, const Places& at) {
  if (!a.target.empty()) throw std::invalid_argument(fmt::format("calibrate: unexpected argument '{}'", a.target));
  CalibrateRequest req;
  req.build = at.build;
  req.out = a.out.empty() ? fs::path() : fs::absolute(a.out);
  req.overwrite = a.overwrite;
  req.name = a.name;
  req.threads = a.threads;
  req.shapes = a.shapes;
  req.repetitions = a.repetitions;
  req.quick = a.quick;
  calibrate(req);
  return 0;
}

int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.help || a.command.empty() || a.command == "help") {
    fmt::print("{}", kHelp);
    return a.help || !a.command.empty() ? 0 : 2;
  }
  // The command line's Slurm values, before any work: they are written into job scripts (runner/slurm_options.h).
  check_slurm_values(a.slurm);
  set_progress_mode(default_progress_mode(a.quiet));
  Places at;
  if (a.retries < 0 || a.retries > 100) {
    throw std::invalid_argument(fmt::format("--retries: {} is not an attempt count from 0 to 100", a.retries));
  }
  at.retries = a.retries;
  at.build = opt_path(a.build, default_build());
  at.build_id = gpt2::build_info().git_commit;
  ConfigResolver resolver(at.build / "stages" / "serial");
  if (a.command == "list") return list(a, at, resolver);
  if (a.command == "compare") {
    if (a.second.empty()) throw std::invalid_argument("compare: two result sets are needed: harness compare A B");
    const fs::path results = opt_path(a.results, fs::path(kRepoRoot) / "results");
    if (!a.results.empty()) check_folder_option("--results", results, false);
    CompareRequest req{a.target, a.second, a.metric, fs::path(kRepoRoot), results,
                       a.out.empty() ? fs::path() : fs::absolute(a.out), a.overwrite};
    fmt::print("{}", compare_results(req));
    return 0;
  }
  if (a.command == "reindex") return reindex(a);
  if (a.command == "calibrate") return calibrate_command(a, at);
  if (!a.launcher.empty() && a.launcher != "local" && a.launcher != "slurm") {
    throw std::invalid_argument(
        fmt::format("--launcher: '{}' is not a launcher (local or slurm)", gpt2::excerpt(a.launcher)));
  }
  if (a.slurm_ranks != "srun" && a.slurm_ranks != "mpiexec") {
    throw std::invalid_argument(fmt::format("--slurm-ranks: '{}' (srun or mpiexec)", gpt2::excerpt(a.slurm_ranks)));
  }
  at.launcher = a.launcher;
  at.slurm = a.slurm;
  at.slurm_mpiexec = a.slurm_ranks == "mpiexec";
  if (at.slurm_options() && a.launcher == "local") {
    throw std::invalid_argument("--partition, --account, --time, --sbatch and --slurm-ranks go with the Slurm "
                                "launcher (--launcher slurm, an experiment's launcher: slurm) or slurm-script");
  }
  if (a.command == "slurm-script") return slurm_script(a, at, resolver);
  if (a.command != "run" && a.command != "report") {
    throw std::invalid_argument(
        fmt::format("unknown command '{}' (expected run, report, compare, list, reindex or slurm-script)", a.command));
  }
  if (a.command == "report" && !a.launcher.empty()) throw std::invalid_argument("--launcher: report runs nothing");
  use_machine(a, resolver);
  if (a.target.empty()) throw std::invalid_argument(fmt::format("{}: which experiment? (see harness --help)", a.command));
  const fs::path file = experiment_file(a.target, fs::path(kRepoRoot) / "experiments");
  at.repo = file.parent_path().parent_path();
  at.results = opt_path(a.results, at.repo / "results");
  at.reports = opt_path(a.reports, at.repo / "reports");
  // Before anything runs: `run` writes both, `report` reads results and writes reports.
  check_folder_option("--results", at.results, a.command == "run");
  check_folder_option("--reports", at.reports, true);
  const Loaded ex = load(file, at, resolver, a.set);  // validates every job before any runs
  check_folder_option("--results", child_of(at.results, ex.name), a.command == "run");
  check_folder_option("--reports", child_of(at.reports, ex.name), true);
  int failed = 0;
  if (a.command == "run") {
    failed = ex.run(a.force);
  } else if (ex.count != "skipped" && !fs::exists(child_of(at.results, ex.name) / ex.index)) {
    throw std::invalid_argument(fmt::format("no results for '{}' in {} (run it first)", ex.name, at.results.string()));
  }
  std::error_code ec;
  const fs::path rel = fs::relative(file, at.repo, ec);
  // Shell-quoted: a path with spaces or `$(...)` in it pastes as itself.
  std::vector<std::string> command = {"build/bench/harness", "run", ec ? file.string() : rel.string()};
  for (const std::string& s : a.set) command.insert(command.end(), {"--set", s});
  const std::string reproduce = command_text(command);
  const auto files = ex.report(reproduce);
  console::err(fmt::format("results: {}\n", (child_of(at.results, ex.name)).string()));
  for (const fs::path& f : files) {
    if (f.extension() == ".md") fmt::print("report: {}\n", f.string());
  }
  return failed > 0 ? 1 : 0;
}

int status_of(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::invalid_argument& e) {
    console::err(fmt::format("harness: error: {}\n", e.what()));
    return 2;
  } catch (const std::exception& e) {
    console::err(fmt::format("harness: error: {}\n", e.what()));
    return 1;
  }
}

}  // namespace

// The harness's progress lines go through the console (util/console.h): a
// stalled terminal or pipe costs lines, never the harness's watch over its
// runs (their timeouts, their guardians). What a command prints as its result
// (list, compare, the report paths) goes through stdio.
int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // a reader gone costs lines (the console sees EPIPE), not the runs' records
  const int status = status_of(argc, argv);
  console::drain(console::kExitStall);
  return status;
}
