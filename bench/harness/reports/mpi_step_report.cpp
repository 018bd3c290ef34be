// The report of an mpi_step experiment: per (ranks, bucket size) the median
// step time, tokens/s and communication time over each run's timed steps
// (the stage's metrics stream, read through util/records.h), then the median
// over rounds; mpi_step.md and mpi_step.csv (see mpi_step_experiment.h).
#include <fmt/format.h>

#include <stdexcept>

#include "records/csv.h"
#include "runner/mpi_step_experiment.h"
#include "render/report_format.h"
#include "util/records.h"
#include "util/stats.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

// One job's rounds: each round's medians over its timed steps.
struct StepJob {
  JobRecord job;
  int ranks = 0;
  double bucket_mb = 0;
  std::vector<double> step_ms, tokens_per_s, comm_ms;  // per round
  Json provenance;                                     // of the first round's summary
};

StepJob read_step_job(JobRecord job) {
  StepJob s;
  s.job = std::move(job);
  const Json& settings = s.job.settings;
  if (settings.is_object()) {
    s.ranks = settings.value("ranks", 0);
    s.bucket_mb = settings.value("bucket_mb", 0.0);
  }
  if (!s.job.ok()) return s;
  const int rounds = settings.value("rounds", 0);
  const size_t warmup = static_cast<size_t>(settings.value("warmup_steps", 0));
  for (int k = 0; k < rounds; ++k) {
    const fs::path metrics = s.job.dir / fmt::format("round-{}", k) / "metrics.jsonl";
    const MetricsStream m = read_metrics_stream(metrics);
    if (m.steps.size() <= warmup) {
      throw std::runtime_error(fmt::format("{}: {} steps, none after the {} warm-up steps", metrics.string(),
                                           m.steps.size(), warmup));
    }
    std::vector<double> ms, tps, comm;
    for (size_t i = warmup; i < m.steps.size(); ++i) {
      ms.push_back(m.steps[i].step_ms);
      tps.push_back(m.steps[i].tokens_per_s);
      comm.push_back(m.steps[i].comm_ms);
    }
    s.step_ms.push_back(median(ms));
    s.tokens_per_s.push_back(median(tps));
    s.comm_ms.push_back(median(comm));
    if (s.provenance.is_null() && m.summary) s.provenance = m.summary->provenance;
  }
  return s;
}

std::string allreduce_text(const StepJob& s) {
  if (s.ranks == 1) return "none (one rank)";
  if (s.bucket_mb == 0) return "one allreduce after backward";
  return fmt::format("{} MiB buckets during backward", s.bucket_mb);
}

std::string field(const Json& p, const char* key) { return field_text(p, key, "?"); }

}  // namespace

std::vector<fs::path> write_mpi_step_report(const MpiStepExperiment& ex, const fs::path& results_dir,
                                            const fs::path& reports_dir, const std::string& reproduce_command) {
  std::vector<StepJob> jobs;
  for (JobRecord& j : read_job_records(results_dir, kJobsIndex, "job")) jobs.push_back(read_step_job(std::move(j)));
  make_reports_dir(reports_dir);

  const StepJob* ref = nullptr;  // the machine: from the first job that completed
  std::optional<double> one_rank_ms;
  for (const StepJob& s : jobs) {
    if (!ref && !s.provenance.is_null()) ref = &s;
    if (!one_rank_ms && s.ranks == 1 && !s.step_ms.empty()) one_rank_ms = median(s.step_ms);
  }
  std::string md = fmt::format("# {}: the MPI stage's training step, with and without bucketed allreduce\n\n", ex.name);
  if (!ex.description.empty()) md += ex.description + "\n\n";
  if (ref) {
    const Json& p = ref->provenance;
    md += fmt::format("Measured on {} ({} cores, OpenBLAS {}, BLAS kernel {}), host {}, {}, communicator {} ({}), "
                      "commit {} (sources {}); {} build, {}, options `{}`.\n\n",
                      field(p, "cpu"), field(p, "cores"), field(p, "openblas"), field(p, "blas_core"), field(p, "host"),
                      field(p, "date"), field(p, "communicator"), field(p, "mpi"), field(p, "git_commit"),
                      field(p, "source_hash"), field(p, "build_type"), field(p, "compiler"), field(p, "build_options"));
  } else {
    md += "Measured on: nothing (no completed jobs).\n\n";
  }
  md += reproduce_block(reproduce_command);
  md += fmt::format(
      "Each job trains {} time(s); a run's figures are medians over its steps after the first {} (warm-up), and "
      "the table gives the median over runs. Comm: time in the gradient and loss collectives per step, as the "
      "stage measures it (with buckets it includes the polling during backward).\n\n",
      ex.rounds, ex.warmup_steps);

  std::string csv = csv_row({"ranks", "bucket_mb", "status", "reason", "rounds", "step_ms_median",
                             "tokens_per_s_median", "comm_ms_median", "comm_share", "speedup_vs_one_rank"});
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> round_lines, not_run;
  for (const StepJob& s : jobs) {
    if (s.step_ms.empty()) {
      not_run.push_back(s.job.not_measured());
      csv += csv_row(
          {std::to_string(s.ranks), exact(s.bucket_mb), s.job.status_word(), s.job.reason(), "0", "", "", "", "", ""});
      continue;
    }
    const double ms = median(s.step_ms), tps = median(s.tokens_per_s), comm = median(s.comm_ms);
    const std::optional<double> speedup = one_rank_ms ? std::optional(*one_rank_ms / ms) : std::nullopt;
    rows.push_back({std::to_string(s.ranks), allreduce_text(s), std::to_string(s.step_ms.size()),
                    fmt::format("{:.1f}", ms), rate(tps), fmt::format("{:.1f}", comm), percent(comm / ms),
                    sig3(speedup)});
    csv += csv_row({std::to_string(s.ranks), exact(s.bucket_mb), "ok", "", std::to_string(s.step_ms.size()),
                    exact(ms), exact(tps), exact(comm), exact(comm / ms), exact(speedup)});
    std::string per_round;
    for (double x : s.step_ms) per_round += fmt::format("{}{:.1f}", per_round.empty() ? "" : ", ", x);
    round_lines.push_back(fmt::format("- {}, {}: {}", s.job.label, allreduce_text(s), per_round));
  }
  if (!rows.empty()) {
    md += md_table({"ranks", "gradient allreduce", "runs", "median ms/step", "tokens/s", "comm ms", "comm share",
                    "speed-up vs 1 rank"},
                   rows, "rlrrrrrr");
    md += "\nPer-run median step time (ms):\n\n";
    for (const std::string& l : round_lines) md += l + "\n";
    md += "\n";
  }
  md += joined("Not measured: ", not_run);
  std::vector<fs::path> written;
  write_report(reports_dir / "mpi_step.csv", csv, written);
  write_report(reports_dir / "mpi_step.md", md, written);
  return written;
}

}  // namespace gpt2::harness
