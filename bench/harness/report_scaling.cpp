// Scaling with MPI ranks: per stage and thread count, the speed-up and
// efficiency of each rank count against the smallest one, and the share of
// training spent communicating; scaling.md, scaling.csv and a speed-up chart
// (report.h).
#include "report_inputs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "chart.h"
#include "csv.h"
#include "report_format.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

void write_scaling(const ReportSpec& spec, const Inputs& in, std::vector<fs::path>& written) {
  // Series: one per (stage, threads) of the MPI stages; rows by ranks, ascending.
  std::map<std::pair<int, int>, std::vector<const ConfigRuns*>> by_series;
  std::vector<std::string> not_run;
  for (const ConfigRuns& c : in.configs) {
    if (c.key.stage != "mpi" && c.key.stage != "mpi_cuda") continue;
    if (c.ok.empty()) {
      not_run.push_back(fmt::format("{} ({})", label(c.key), status_text(c)));
    } else {
      by_series[{stage_index(c.key.stage), c.key.threads}].push_back(&c);
    }
  }
  std::string csv = csv_row({"stage", "threads", "ranks", "runs_ok", "runs_total", "training_s_median",
                             "tokens_per_s_median", "speedup", "efficiency", "comm_share_median"});
  std::vector<std::vector<std::string>> rows;
  std::vector<Series> series;
  std::map<int, Series> ideal;  // by base rank count
  for (const auto& [id, configs] : by_series) {
    const ConfigRuns* base = nullptr;
    for (const ConfigRuns* c : configs) {
      if (!base && median_of(c->ok, "training_s")) base = c;
    }
    const auto base_s = base ? median_of(base->ok, "training_s") : std::nullopt;
    Series s{fmt::format("{} t{}", configs[0]->key.stage, id.second), {}, false};
    for (const ConfigRuns* c : configs) {
      const auto train = median_of(c->ok, "training_s");
      const auto tokens = median_of(c->ok, "tokens_per_s");
      std::vector<double> shares;
      for (const Run* r : c->ok) {
        const auto comm = r->get("comm_s"), train_s = r->get("training_s");
        if (comm && train_s && *train_s > 0) shares.push_back(*comm / *train_s);
      }
      const auto share = summarize(shares);
      std::optional<double> speedup, efficiency;
      if (base_s && train && *train > 0 && base->key.ranks > 0) {
        speedup = *base_s / *train;
        efficiency = *speedup / (static_cast<double>(c->key.ranks) / base->key.ranks);
        s.points[c->key.ranks] = *speedup;
        Series& line = ideal[base->key.ranks];
        line.title = fmt::format("ideal (from {} ranks)", base->key.ranks);
        line.dashed = true;
        line.points[c->key.ranks] = static_cast<double>(c->key.ranks) / base->key.ranks;
      }
      const auto share_med = share ? std::optional(share->median) : std::nullopt;
      csv += csv_row({c->key.stage, std::to_string(c->key.threads), std::to_string(c->key.ranks),
                      std::to_string(c->ok.size()), std::to_string(c->all.size()), exact(train), exact(tokens),
                      exact(speedup), exact(efficiency), exact(share_med)});
      rows.push_back({c->key.stage, std::to_string(c->key.threads), std::to_string(c->key.ranks),
                      fmt::format("{}/{}", c->ok.size(), c->all.size()), seconds(train), rate(tokens), sig3(speedup),
                      sig3(efficiency), percent(share_med)});
    }
    if (!s.points.empty()) series.push_back(std::move(s));
  }
  for (auto& [base, line] : ideal) series.push_back(std::move(line));

  std::string md = preamble(spec, in.runs, "scaling with MPI ranks");
  if (rows.empty()) {
    md += fmt::format("Nothing to scale: {} of the mpi or mpi_cuda stages.\n\n", kNoRuns);
  } else {
    md += md_table({"Stage", "Threads", "Ranks", "Runs ok", "Training s, median", "Tokens/s, median", "Speed-up",
                    "Efficiency", "Comm share of training, median"},
                   rows, "lrrrrrrrr");
    md +=
        "\nSpeed-up: median training time at the smallest rank count of the same stage and thread count, "
        "divided by the median at this rank count. Efficiency: speed-up / (ranks / smallest ranks). Comm "
        "share: median over the completed runs of comm_s / training_s.\n\n";
  }
  md += joined("Not in the table (no completed runs): ", not_run);
  if (series.empty()) {
    md += fmt::format("(plot not drawn: {})\n", kNoRuns);
  } else {
    const std::string body =
        "set title \"Speed-up against the smallest rank count\"\n"
        "set xlabel \"ranks\"\nset ylabel \"speed-up\"\nset key top left\n"
        "set xrange [0:*]\nset yrange [0:*]\n" +
        line_chart_plot("scaling", series, "linespoints");
    md += draw_chart(spec.reports_dir, "scaling", "Speed-up vs ranks", line_chart_data("ranks", series), body, written);
  }
  write_report(spec.reports_dir / "scaling.csv", csv, written);
  write_report(spec.reports_dir / "scaling.md", md, written);
}

}  // namespace gpt2::harness
