// Stage experiments through the job loop, and their runs.csv and loss.csv
// (see stage_runner.h).
#include "runner/stage_runner.h"

#include <fmt/format.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>

#include "records/run_plan.h"
#include "records/tables.h"
#include "runner/job_loop.h"
#include "runner/process.h"
#include "runner/progress.h"
#include "runner/slurm_options.h"
#include "util/console.h"
#include "util/files.h"
#include "util/provenance.h"
#include "util/records.h"
#include "util/stats.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

Availability stage_availability(const std::string& stage, const fs::path& stages_dir) {
  Availability a;
  a.program = stages_dir / stage;
  if (access(a.program.c_str(), X_OK) != 0) {
    if (stage == "mpi") {
      a.reason = "not built: MPI (MPICH) was not found when the build was configured";
    } else if (stage == "mpi_cuda" && access((stages_dir / "cuda").c_str(), X_OK) == 0) {
      a.reason = "not built: NCCL (or MPI) was not found when the build was configured (the cuda stage was built)";
    } else if (stage == "cuda" || stage == "mpi_cuda") {
      a.reason = "not built: this build has no CUDA stages";
    } else {
      a.reason = fmt::format("not built: no program {}", a.program.string());
    }
    return a;
  }
  if ((stage == "mpi" || stage == "mpi_cuda") && find_on_path("mpiexec").empty()) {
    a.reason = "mpiexec not found on PATH";
    return a;
  }
  a.available = true;
  return a;
}

namespace {
// The run folder holds a complete checkpoint (docs/guarantees.md): its
// checkpoint.bin, or a step folder whose COMPLETE marker is written (a
// sharded checkpoint has no checkpoint.bin). `--resume auto` then takes the
// newest; a run whose saves were all cut short starts afresh.
bool has_complete_checkpoint(const fs::path& out_dir) {
  std::error_code ec;
  if (fs::is_regular_file(out_dir / "checkpoint.bin", ec)) return true;
  for (const auto& e : fs::directory_iterator(out_dir / "checkpoints", ec)) {
    if (e.path().filename().string().starts_with("step-") && fs::is_regular_file(e.path() / "COMPLETE", ec)) return true;
  }
  return false;
}
}  // namespace

std::vector<std::string> stage_train_command(const std::string& stage, const fs::path& program, int ranks,
                                             const std::string& hostfile, const fs::path& run_yaml,
                                             const fs::path& out_dir) {
  std::vector<std::string> argv;
  if (stage == "mpi" || stage == "mpi_cuda") {
    argv = {"mpiexec", "-n", std::to_string(ranks)};
    if (!hostfile.empty()) argv.insert(argv.end(), {"-f", hostfile});
  }
  argv.insert(argv.end(), {program.string(), "train", "--config", run_yaml.string(), "--out", out_dir.string()});
  for (const std::string& f : start_flags(out_dir)) argv.push_back(f);
  if (!hostfile.empty()) argv.insert(argv.end(), {"--hostfile", hostfile});
  return argv;
}

std::vector<std::string> start_flags(const fs::path& out_dir) {
  if (has_complete_checkpoint(out_dir)) return {"--resume", "auto"};
  return {"--overwrite"};
}

namespace {

// What a row says of the run whatever became of it: which run it is.
RunRow planned_row(const std::string& experiment, const RunSpec& r) {
  RunRow row;
  row.experiment = experiment;
  row.run_id = r.id;
  row.stage = r.stage;
  row.ranks = r.ranks;
  row.threads = r.threads;
  row.repetition = r.repetition;
  row.tp = r.tp;
  row.block_types = r.tp > 1 ? r.block_types : "";  // one rank computes the standard block whatever the list says
  row.pipeline = r.pipeline;
  row.variant = r.variant;
  row.config_digest = r.config_digest;
  row.seed = r.seed;
  return row;
}

// The formula columns from rank 0's plan: its groups' calls and bytes per
// step, and its parameter count.
void set_from_plan(Counters& c, const Json& plan) {
  const Json& rank0 = plan["per_rank"][0];
  const Json& comm = rank0["comm"];
  auto number = [](const Json& j) { return j.is_null() ? std::nullopt : std::optional(j.get<double>()); };
  c.set("formula_tp_calls", number(comm["tp"]["calls"]));
  c.set("formula_tp_bytes", number(comm["tp"]["bytes"]));
  c.set("formula_dp_calls", number(comm["dp"]["calls"]));
  c.set("formula_dp_bytes", number(comm["dp"]["bytes"]));
  c.set("params", number(rank0["memory"]["params"]));
  if (plan.contains("time")) c.set("predicted_step_ms", plan["time"]["step_s"].get<double>() * 1e3);
}

// The median of a per-step time over the steps after the first (the first
// pays for the first touch of every buffer: not the steady state).
double median_after_first(const std::vector<StepRecord>& steps, double StepRecord::*field) {
  std::vector<double> v;
  for (size_t k = steps.size() > 1 ? 1 : 0; k < steps.size(); ++k) v.push_back(steps[k].*field);
  return median(std::move(v));
}

// The median of a per-step count (every step counts the same; the median
// keeps one odd step from deciding).
double median_count(const std::vector<StepRecord>& steps, uint64_t StepRecord::*field) {
  std::vector<uint64_t> v;
  for (const StepRecord& s : steps) v.push_back(s.*field);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return static_cast<double>(v[v.size() / 2]);
}

// The counters of the step and eval records, and the loss rows.
void set_from_steps(Counters& c, const MetricsStream& m) {
  if (!m.evals.empty()) c.set("val_loss", m.evals.back().val_loss);
  if (m.steps.empty()) return;
  c.set("step_ms", median_after_first(m.steps, &StepRecord::step_ms));
  c.set("mfu", median_after_first(m.steps, &StepRecord::mfu));
  if (m.steps.front().mem_params > 0) {
    c.set("params", static_cast<double>(m.steps.front().mem_params / sizeof(float)));
    c.set("activation_bytes", static_cast<double>(m.steps.front().mem_activations));
  }
  for (auto [name, field] : {std::pair("tp_calls", &StepRecord::tp_calls), {"tp_bytes", &StepRecord::tp_bytes},
                             {"dp_calls", &StepRecord::dp_calls}, {"dp_bytes", &StepRecord::dp_bytes}}) {
    c.set(name, median_count(m.steps, field));
  }
}

void set_from_summary(Counters& c, const RunSummary& sum) {
  c.set("training_s", sum.train_s);
  c.set("inference_s", sum.inference_s);
  c.set("tokens_per_s", sum.tokens_per_s);
  c.set("final_loss", sum.final_loss);
  c.set("steps", static_cast<double>(sum.steps));
  c.set("comm_s", sum.comm_s);
  c.set("peak_rss_mb", sum.peak_rss_mb);
}

void set_provenance(RunRow& row, const Json& provenance) {
  for (auto [column, key] : {std::pair(&RunRow::git_commit, "git_commit"), {&RunRow::git_dirty, "git_dirty"},
                             {&RunRow::build_type, "build_type"}, {&RunRow::compiler, "compiler"},
                             {&RunRow::cpu, "cpu"}, {&RunRow::cores, "cores"}, {&RunRow::blas_core, "blas_core"},
                             {&RunRow::backend, "backend"}, {&RunRow::host, "host"}, {&RunRow::date, "date"},
                             {&RunRow::source_hash, "source_hash"}, {&RunRow::build_options, "build_options"},
                             {&RunRow::openblas, "openblas"}, {&RunRow::mpi, "mpi"}}) {
    row.*column = field_text(provenance, key);
  }
  std::string cuda;  // the device libraries, one text
  for (auto [key, name] : {std::pair("cuda_runtime", "runtime"), {"cuda_driver", "driver"}, {"cublas", "cuBLAS"},
                           {"nccl", "NCCL"}}) {
    const std::string v = field_text(provenance, key);
    if (!v.empty()) cuda += fmt::format("{}{} {}", cuda.empty() ? "" : ", ", name, v);
  }
  row.cuda = cuda;
}

}  // namespace

RunRow run_row(const std::string& experiment, const RunSpec& r, const Status& st, const fs::path& dir,
               std::vector<LossRow>& loss) {
  RunRow row = planned_row(experiment, r);
  row.status = st.status;
  row.reason = st.reason;
  row.attempts = st.attempts;
  // Provenance: the run's own when it completed, else this machine's and
  // build's, and the time of the attempt; the BLAS kernel and the backend are
  // the run's to name (the harness runs no kernels), so they stay empty.
  Json provenance = provenance_json(machine_info(), build_info());
  provenance["date"] = st.date;
  if (st.status == "ok") {
    const MetricsStream m = read_metrics_stream(dir / "metrics.jsonl");
    std::map<int64_t, double> val;
    for (const EvalRecord& e : m.evals) val[e.step] = e.val_loss;
    for (const StepRecord& s : m.steps) {
      const auto v = val.find(s.step);
      loss.push_back(LossRow{experiment, r.id, r.stage, r.ranks, r.threads, r.repetition, s.step, s.loss,
                             v == val.end() ? std::nullopt : std::optional(v->second)});
    }
    set_from_steps(row.counters, m);
    if (const std::optional<Json> plan = read_plan(dir)) set_from_plan(row.counters, *plan);
    const std::optional<double> predicted = row.counters.get("predicted_step_ms"), step = row.counters.get("step_ms");
    if (predicted && step && *step > 0) row.counters.set("prediction_error", *predicted / *step - 1.0);
    if (m.summary) {
      set_from_summary(row.counters, *m.summary);
      provenance = m.summary->provenance;
    }
  }
  set_provenance(row, provenance);
  return row;
}

std::vector<RunRow> write_results_csv(const Experiment& ex, const fs::path& results_dir) {
  std::vector<RunRow> runs;
  std::vector<LossRow> loss;
  for (const RunSpec& r : ex.runs) {
    const fs::path dir = results_dir / r.id;
    const std::optional<Status> st = read_status(dir);
    if (st) {
      runs.push_back(run_row(ex.name, r, *st, dir, loss));
    } else {
      // Listed all the same, so a report counts the planned repetitions
      // ("ok 1/3; not run 2/3" after an interruption, not "ok 1/1").
      RunRow row = planned_row(ex.name, r);
      row.status = "not run";
      runs.push_back(std::move(row));
    }
  }
  write_file_atomically(results_dir / "runs.csv", runs_csv(runs));
  write_file_atomically(results_dir / "loss.csv", loss_csv(loss));
  return runs;
}

RunSpec spec_of_row(const RunRow& row) {
  RunSpec s;
  s.stage = row.stage;
  s.ranks = row.ranks;
  s.threads = row.threads;
  s.tp = row.tp;
  s.block_types = row.block_types;
  s.pipeline = row.pipeline;
  s.variant = row.variant;
  s.config_digest = row.config_digest;
  s.repetition = row.repetition;
  s.seed = row.seed;
  s.id = row.run_id;
  return s;
}

int reindex_results(const fs::path& results_dir) {
  std::vector<RunRow> runs = read_runs_csv(results_dir / "runs.csv");
  const std::vector<LossRow> old_loss = read_loss_csv(results_dir / "loss.csv");
  std::vector<LossRow> loss;
  int rebuilt = 0;
  for (RunRow& row : runs) {
    const fs::path dir = results_dir / row.run_id;
    const std::optional<Status> st = fs::is_directory(dir) ? read_status(dir) : std::nullopt;
    if (!st) {
      for (const LossRow& l : old_loss) {
        if (l.run_id == row.run_id) loss.push_back(l);
      }
      continue;
    }
    row = run_row(row.experiment, spec_of_row(row), *st, dir, loss);
    ++rebuilt;
  }
  write_file_atomically(results_dir / "runs.csv", runs_csv(runs));
  write_file_atomically(results_dir / "loss.csv", loss_csv(loss));
  return rebuilt;
}

int run_experiment(const Experiment& ex, const RunnerOptions& opt) {
  std::vector<Job> jobs;
  if (opt.slurm) {  // before anything is submitted
    (void)sbatch_path(opt.results_dir, "--results");  // each run's #SBATCH --output is in it
    std::vector<RunSpec> runnable;
    for (const RunSpec& r : ex.runs) {
      if (!r.hostfile.empty()) {
        throw std::invalid_argument(fmt::format("--launcher slurm: run {} names a hostfile; under Slurm the "
                                                "allocation says where the ranks run", r.id));
      }
      if (stage_availability(r.stage, opt.stages_dir).available) runnable.push_back(r);
    }
    check_slurm(*opt.slurm, runnable);
  }
  for (const RunSpec& r : ex.runs) {
    const Availability av = stage_availability(r.stage, opt.stages_dir);
    jobs.push_back(Job{r.id, "", fmt::format("{} steps, timeout {:.0f} s", r.steps, ex.timeout_s), av.reason, nullptr,
                       [&ex, &r, program = av.program, slurm = opt.slurm](const fs::path& dir) {
                         write_file_atomically(dir / "run.yaml", r.config);
                         write_file_atomically(dir / "plan.json", r.plan);
                         std::vector<std::string> argv;
                         if (slurm) {  // one batch job, waited for: its exit status is the stage's
                           write_file_atomically(dir / "job.sh", slurm_job_script(*slurm, r, program, dir,
                                                                                  start_flags(dir), ex.timeout_s));
                           argv = slurm_submit_and_wait(dir / "job.sh", dir / "log.txt");
                         } else {
                           argv = stage_train_command(r.stage, program, r.ranks, r.hostfile, dir / "run.yaml", dir);
                         }
                         LaunchOptions opt;
                         opt.timeout_s = ex.timeout_s;
                         opt.on_tick = [&dir, &r] { progress_from_metrics(dir, r.steps); };
                         if (slurm) opt.if_harness_dies = [log = dir / "log.txt"] { slurm_cancel(log); };
                         const int rc = launch(argv, dir / "log.txt", opt);
                         if (slurm && rc == -1) slurm_cancel(dir / "log.txt");  // timed out: the job goes too
                         progress_from_metrics(dir, r.steps);  // the last figures, however short the run
                         Status st = status_of_exit(slurm && rc > 0 ? slurm_stage_status(dir / "log.txt", rc) : rc,
                                                    dir / "log.txt", ex.timeout_s);
                         if (slurm && rc != 0) {  // the program's own words, not srun's
                           if (const std::string why = slurm_program_error(dir / "log.txt"); !why.empty()) {
                             st.reason = why;
                           }
                         }
                         if (st.status == "ok" && !fs::exists(dir / "metrics.jsonl")) {
                           st = Status{"failed", "the program exited 0 but wrote no metrics stream", 0, ""};
                         }
                         if (slurm) st.attempts = std::max(1, slurm_attempts(dir));  // Slurm's requeues count
                         return st;
                       }});
    jobs.back().resumable = true;  // an interrupted or preempted attempt continues from its checkpoint
  }
  // runs.csv after every run: an interruption loses nothing recorded.
  const int failed = run_jobs(jobs, opt.results_dir, opt.force, programs_identity(opt.stages_dir),
                              [&] { write_results_csv(ex, opt.results_dir); }, opt.retries);
  // The step-time model's misses (harness run --machine): past its bound, named.
  for (const RunRow& row : write_results_csv(ex, opt.results_dir)) {
    const std::optional<double> e = row.counters.get("prediction_error");
    if (e && std::fabs(*e) > kPredictionBound) {
      console::err(
          fmt::format("{}: predicted step {:.1f} ms against {:.1f} ms measured ({:+.1f}%): past the "
                      "model's {:.0f}% (docs/prediction.md)\n",
                      row.run_id, *row.counters.get("predicted_step_ms"), *row.counters.get("step_ms"), 100 * *e,
                      100 * kPredictionBound));
    }
  }
  return failed;
}

}  // namespace gpt2::harness
