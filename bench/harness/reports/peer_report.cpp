// The report of a peer experiment: per thread count the median over rounds
// of each side's step time (each round's own median over its timed steps),
// tokens/s and the ratio; peer.md and peer.csv (see peer_experiment.h).
#include <fmt/format.h>

#include <stdexcept>

#include "records/csv.h"
#include "runner/peer_experiment.h"
#include "render/report_format.h"
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

// The machine and build the completed jobs ran on (the first one's), and the reproduce command.
std::string peer_preamble(const PeerExperiment& ex, const std::vector<PeerJob>& jobs, const std::string& command) {
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
  md += reproduce_block(command);
  md += fmt::format(
      "Each job alternates ours and PyTorch for {} rounds of {} untimed and {} timed steps per side; a round's "
      "figure is the median of its timed steps, and the table gives the median over rounds.\n\n",
      ex.rounds, ex.warmup, ex.steps);
  return md;
}

// A completed job's figures: medians, throughput, and under load each side against its own idle time.
struct PeerRow {
  const PeerJob* p = nullptr;
  double om = 0, pm = 0, ours_tps = 0, peer_tps = 0, ours_x = 0, peer_x = 0;
  bool has_idle = false;
};

PeerRow row_of(const PeerJob& p, const std::vector<PeerJob>& jobs) {
  PeerRow r{&p, median(p.ours_ms), median(p.peer_ms)};
  const Json& info = *p.ours_info;
  const double tokens = static_cast<double>(info.value("B", 0)) * info.value("T", 0);
  r.ours_tps = tokens / r.om * 1e3;
  r.peer_tps = tokens / r.pm * 1e3;
  const PeerJob* idle = p.busy > 0 ? idle_job(jobs, p) : nullptr;
  r.has_idle = idle != nullptr;
  if (idle) {
    r.ours_x = r.om / median(idle->ours_ms);
    r.peer_x = r.pm / median(idle->peer_ms);
  }
  return r;
}

// The table (with the busy-process columns when any job ran under load), its notes and the per-round lines.
std::string peer_md(const std::vector<PeerRow>& rows, bool loaded) {
  std::vector<std::vector<std::string>> cells;
  std::string rounds;
  for (const PeerRow& r : rows) {
    const PeerJob& p = *r.p;
    std::vector<std::string> row = {std::to_string(p.threads)};
    if (loaded) row.push_back(std::to_string(p.busy));
    row.insert(row.end(), {rate(r.om), rate(r.pm), rate(r.ours_tps), rate(r.peer_tps), fmt::format("{:.2f}x", r.pm / r.om)});
    if (loaded) {
      row.push_back(r.has_idle ? fmt::format("{:.2f}x", r.ours_x) : "");
      row.push_back(r.has_idle ? fmt::format("{:.2f}x", r.peer_x) : "");
    }
    cells.push_back(row);
    rounds += fmt::format("- {} thread(s){}: {} / {}\n", p.threads, p.busy > 0 ? fmt::format(", {} busy", p.busy) : "",
                          rounds_text(p.ours_ms), rounds_text(p.peer_ms));
  }
  std::vector<std::string> head = {"threads"};
  if (loaded) head.push_back("busy processes");
  head.insert(head.end(), {"ours ms/step (median)", "PyTorch ms/step (median)", "ours tokens/s", "PyTorch tokens/s",
                           "ours / PyTorch"});
  if (loaded) head.insert(head.end(), {"ours / ours idle", "PyTorch / PyTorch idle"});
  std::string md = md_table(head, cells, std::string(head.size(), 'r'));
  md += "\nours / PyTorch: PyTorch's step time over ours (above 1: ours is faster).";
  if (loaded) {
    md += " busy processes: processes that only spin, running through every round of both sides; ours / ours "
          "idle (and PyTorch's): the step time over the same side's without busy processes at the same thread "
          "count (1.00x: the load costs nothing).";
  }
  return md + "\n\nPer-round medians (ms), ours / PyTorch:\n\n" + rounds + "\n";
}

}  // namespace

std::vector<fs::path> write_peer_report(const PeerExperiment& ex, const fs::path& results_dir,
                                        const fs::path& reports_dir, const std::string& reproduce_command) {
  std::vector<PeerJob> jobs;
  for (JobRecord& j : read_job_records(results_dir, kJobsIndex, "job")) jobs.push_back(read_peer_job(std::move(j)));
  make_reports_dir(reports_dir);
  std::string md = peer_preamble(ex, jobs, reproduce_command);
  bool loaded = false;  // any job with busy processes: then the table has their columns
  for (const PeerJob& p : jobs) loaded = loaded || p.busy > 0;
  std::string csv = csv_row({"threads", "busy_processes", "status", "reason", "rounds", "ours_ms_median",
                             "peer_ms_median", "ours_tokens_per_s", "peer_tokens_per_s", "ours_over_peer_tokens_per_s",
                             "ours_rounds_ms", "peer_rounds_ms", "ours_over_idle", "peer_over_idle"});
  std::vector<PeerRow> rows;
  std::vector<std::string> not_run;
  for (const PeerJob& p : jobs) {
    if (!p.job.ok()) {
      not_run.push_back(p.job.not_measured());
      csv += csv_row({std::to_string(p.threads), std::to_string(p.busy), p.job.status_word(), p.job.reason(), "0", "",
                      "", "", "", "", "", "", "", ""});
      continue;
    }
    const PeerRow r = row_of(p, jobs);
    rows.push_back(r);
    csv += csv_row({std::to_string(p.threads), std::to_string(p.busy), "ok", "", std::to_string(p.ours_ms.size()),
                    exact(r.om), exact(r.pm), exact(r.ours_tps), exact(r.peer_tps), exact(r.pm / r.om),
                    rounds_text(p.ours_ms, true), rounds_text(p.peer_ms, true), r.has_idle ? exact(r.ours_x) : "",
                    r.has_idle ? exact(r.peer_x) : ""});
  }
  if (!rows.empty()) md += peer_md(rows, loaded);
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
