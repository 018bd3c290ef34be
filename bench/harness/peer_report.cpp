// The report of a peer experiment: per thread count the median over rounds
// of each side's step time (each round's own median over its timed steps),
// tokens/s and the ratio; peer.md and peer.csv (see peer_experiment.h).
#include <fmt/format.h>

#include <stdexcept>

#include "csv.h"
#include "peer_experiment.h"
#include "report_format.h"
#include "util/stats.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

// One job's rounds, as both programs wrote them.
struct PeerJob {
  JobRecord job;
  int threads = 0, busy = 0;  // busy: processes spinning beside the job
  std::vector<double> ours_ms, peer_ms;  // per round
  std::optional<Json> ours_info;         // train_step's JSON of the first round: machine, model, B, T
  std::string torch_version;
};

PeerJob read_peer_job(JobRecord job) {
  PeerJob p;
  p.job = std::move(job);
  p.threads = p.job.settings.is_object() ? p.job.settings.value("threads", 0) : 0;
  p.busy = p.job.settings.is_object() ? p.job.settings.value("busy_processes", 0) : 0;
  if (!p.job.ok()) return p;
  const int rounds = p.job.settings.value("rounds", 0);
  for (int k = 0; k < rounds; ++k) {
    const fs::path ours = p.job.dir / fmt::format("ours-{}.json", k), peer = p.job.dir / fmt::format("peer-{}.json", k);
    const std::optional<Json> o = read_json_file(ours), q = read_json_file(peer);
    if (!o || !q) throw std::runtime_error(fmt::format("{}: round {} has no {}", p.job.dir.string(), k,
                                                       !o ? ours.filename().string() : peer.filename().string()));
    try {
      p.ours_ms.push_back(o->at("results").at(0).at("median_ms").get<double>());
      p.peer_ms.push_back(q->at("median_ms").get<double>());
      if (!p.ours_info) p.ours_info = *o;
      p.torch_version = q->value("torch", "");
    } catch (const Json::exception& e) {
      throw std::runtime_error(fmt::format("{}: round {}: {}", p.job.dir.string(), k, e.what()));
    }
  }
  return p;
}

// The job at the same thread count without busy processes, whose step time
// a loaded job is compared with; nullptr if there is none with results.
const PeerJob* idle_job(const std::vector<PeerJob>& jobs, const PeerJob& p) {
  for (const PeerJob& q : jobs) {
    if (q.threads == p.threads && q.busy == 0 && q.job.ok() && !q.ours_ms.empty()) return &q;
  }
  return nullptr;
}

// Each round's figure: rounded for the Markdown, exact (";"-separated) for the CSV.
std::string rounds_text(const std::vector<double>& ms, bool exact_values = false) {
  std::string out;
  for (double x : ms) {
    if (!out.empty()) out += exact_values ? ";" : ", ";
    out += exact_values ? exact(x) : rate(x);
  }
  return out;
}

}  // namespace

std::vector<fs::path> write_peer_report(const PeerExperiment& ex, const fs::path& results_dir,
                                        const fs::path& reports_dir, const std::string& reproduce_command) {
  std::vector<PeerJob> jobs;
  for (JobRecord& j : read_job_records(results_dir, kJobsIndex, "job")) jobs.push_back(read_peer_job(std::move(j)));
  make_reports_dir(reports_dir);

  const PeerJob* ref = nullptr;  // the machine: from the first job that completed
  for (const PeerJob& p : jobs) {
    if (!ref && p.ours_info) ref = &p;
  }
  std::string md = fmt::format("# {}: our training step against PyTorch, side by side\n\n", ex.name);
  if (!ex.description.empty()) md += ex.description + "\n\n";
  if (ref) {
    const Json& m = *ref->ours_info;
    md += fmt::format(
        "Measured on {} ({} cores), OpenBLAS {} with kernel `{}` (OPENBLAS_CORETYPE={}), OpenMP wait policy of ours "
        "{}, {}; commit {} (sources {}), options `{}`; model `{}`, B {} T {}, {} GFLOP per step; PyTorch {}.\n\n",
        m.value("cpu", "?"), m.value("cores", 0), m.value("openblas", "?"), m.value("blas_core", "?"),
        m.value("openblas_coretype", "?"), m.value("omp_wait_policy", "?"), m.value("date", "?"),
        m.value("git_commit", "?"), m.value("source_hash", "?"), m.value("build_options", "?"),
        m.value("model", "?"), m.value("B", 0), m.value("T", 0),
        sig3(m.value("flops_per_step", 0.0) / 1e9), ref->torch_version.empty() ? "?" : ref->torch_version);
  } else {
    md += "Measured on: nothing (no completed jobs).\n\n";
  }
  md += reproduce_block(reproduce_command);
  md += fmt::format(
      "Each job alternates ours and PyTorch for {} rounds of {} untimed and {} timed steps per side; a round's "
      "figure is the median of its timed steps, and the table gives the median over rounds.\n\n",
      ex.rounds, ex.warmup, ex.steps);

  bool loaded = false;  // any job with busy processes: then the table has their columns
  for (const PeerJob& p : jobs) loaded = loaded || p.busy > 0;
  std::string csv = csv_row({"threads", "busy_processes", "status", "reason", "rounds", "ours_ms_median",
                             "peer_ms_median", "ours_tokens_per_s", "peer_tokens_per_s", "ours_over_peer_tokens_per_s",
                             "ours_rounds_ms", "peer_rounds_ms", "ours_over_idle", "peer_over_idle"});
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> round_lines, not_run;
  for (const PeerJob& p : jobs) {
    if (!p.job.ok()) {
      not_run.push_back(p.job.not_measured());
      csv += csv_row({std::to_string(p.threads), std::to_string(p.busy), p.job.status_word(), p.job.reason(), "0", "",
                      "", "", "", "", "", "", "", ""});
      continue;
    }
    const double om = median(p.ours_ms), pm = median(p.peer_ms);
    const Json& info = *p.ours_info;
    const double tokens = static_cast<double>(info.value("B", 0)) * info.value("T", 0);
    const double ours_tps = tokens / om * 1e3, peer_tps = tokens / pm * 1e3;
    // Under load: each side's step time over its own without load (same thread count).
    const PeerJob* idle = p.busy > 0 ? idle_job(jobs, p) : nullptr;
    const double ours_x = idle ? om / median(idle->ours_ms) : 0, peer_x = idle ? pm / median(idle->peer_ms) : 0;
    std::vector<std::string> row = {std::to_string(p.threads)};
    if (loaded) row.push_back(std::to_string(p.busy));
    row.insert(row.end(), {rate(om), rate(pm), rate(ours_tps), rate(peer_tps), fmt::format("{:.2f}x", pm / om)});
    if (loaded) {
      row.push_back(idle ? fmt::format("{:.2f}x", ours_x) : "");
      row.push_back(idle ? fmt::format("{:.2f}x", peer_x) : "");
    }
    rows.push_back(row);
    csv += csv_row({std::to_string(p.threads), std::to_string(p.busy), "ok", "", std::to_string(p.ours_ms.size()),
                    exact(om), exact(pm), exact(ours_tps), exact(peer_tps), exact(pm / om),
                    rounds_text(p.ours_ms, true), rounds_text(p.peer_ms, true), idle ? exact(ours_x) : "",
                    idle ? exact(peer_x) : ""});
    round_lines.push_back(fmt::format("- {} thread(s){}: {} / {}", p.threads,
                                      p.busy > 0 ? fmt::format(", {} busy", p.busy) : "", rounds_text(p.ours_ms),
                                      rounds_text(p.peer_ms)));
  }
  if (!rows.empty()) {
    std::vector<std::string> head = {"threads"};
    if (loaded) head.push_back("busy processes");
    head.insert(head.end(), {"ours ms/step (median)", "PyTorch ms/step (median)", "ours tokens/s", "PyTorch tokens/s",
                             "ours / PyTorch"});
    if (loaded) head.insert(head.end(), {"ours / ours idle", "PyTorch / PyTorch idle"});
    md += md_table(head, rows, std::string(head.size(), 'r'));
    md += "\nours / PyTorch: PyTorch's step time over ours (above 1: ours is faster).";
    if (loaded) {
      md += " busy processes: processes that only spin, running through every round of both sides; ours / ours "
            "idle (and PyTorch's): the step time over the same side's without busy processes at the same thread "
            "count (1.00x: the load costs nothing).";
    }
    md += "\n\n";
    md += "Per-round medians (ms), ours / PyTorch:\n\n";
    for (const std::string& l : round_lines) md += l + "\n";
    md += "\n";
  }
  md += joined("Not measured: ", not_run);
  md += "PyTorch runs `bench/peers/torch_gpt2.py`, the model the PyTorch cross-check tests against, loaded with our "
        "initial weights, with `torch.set_num_threads(N)`, `OPENBLAS_NUM_THREADS=N` and `OMP_NUM_THREADS=N` so its "
        "two thread pools do not fight over the cores; ours is `build/bench/train_step`.\n";
  std::vector<fs::path> written;
  write_report(reports_dir / "peer.csv", csv, written);
  write_report(reports_dir / "peer.md", md, written);
  return written;
}

}  // namespace gpt2::harness
