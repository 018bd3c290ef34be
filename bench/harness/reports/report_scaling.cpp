// Scaling with MPI ranks: per stage and thread count, the speed-up and
// efficiency of each rank count against the smallest one, and the share of
// training spent communicating; scaling.md, scaling.csv and a speed-up chart
// (report.h).
#include "reports/report_inputs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "render/chart.h"
#include "records/csv.h"
#include "render/report_format.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

// One configuration's point: its medians, and its speed-up and efficiency
// against the smallest rank count of its series.
struct Point {
  const ConfigRuns* c = nullptr;
  std::optional<double> train, tokens, speedup, efficiency, share;
};

Point point_of(const ConfigRuns& c, const ConfigRuns* base, std::optional<double> base_s) {
  Point p{&c, median_of(c.ok, "training_s"), median_of(c.ok, "tokens_per_s"), {}, {}, {}};
  std::vector<double> shares;
  for (const Run* r : c.ok) {
    const auto comm = r->get("comm_s"), train_s = r->get("training_s");
    if (comm && train_s && *train_s > 0) shares.push_back(*comm / *train_s);
  }
  const auto share = summarize(shares);
  if (share) p.share = share->median;
  if (base_s && p.train && *p.train > 0 && base->key.ranks > 0) {
    p.speedup = *base_s / *p.train;
    p.efficiency = *p.speedup / (static_cast<double>(c.key.ranks) / base->key.ranks);
  }
  return p;
}

// Each series (a stage and thread count, by ranks): its points, its speed-up
// curve and the ideal line from its base.
std::vector<Point> points_of(const std::map<std::pair<int, int>, std::vector<const ConfigRuns*>>& by_series,
                             std::vector<Series>& series) {
  std::vector<Point> points;
  std::map<int, Series> ideal;  // by base rank count
  for (const auto& [id, configs] : by_series) {
    const ConfigRuns* base = nullptr;
    for (const ConfigRuns* c : configs) {
      if (!base && median_of(c->ok, "training_s")) base = c;
    }
    const auto base_s = base ? median_of(base->ok, "training_s") : std::nullopt;
    Series s{fmt::format("{} t{}", configs[0]->key.stage, id.second), {}, false};
    for (const ConfigRuns* c : configs) {
      const Point p = point_of(*c, base, base_s);
      if (p.speedup) {
        s.points[c->key.ranks] = *p.speedup;
        Series& line = ideal[base->key.ranks];
        line.title = fmt::format("ideal (from {} ranks)", base->key.ranks);
        line.dashed = true;
        line.points[c->key.ranks] = static_cast<double>(c->key.ranks) / base->key.ranks;
      }
      points.push_back(p);
    }
    if (!s.points.empty()) series.push_back(std::move(s));
  }
  for (auto& [base, line] : ideal) series.push_back(std::move(line));
  return points;
}

std::string scaling_csv(const std::vector<Point>& points) {
  std::string csv = csv_row({"stage", "threads", "ranks", "runs_ok", "runs_total", "training_s_median",
                             "tokens_per_s_median", "speedup", "efficiency", "comm_share_median"});
  for (const Point& p : points) {
    const ConfigKey& k = p.c->key;
    csv += csv_row({k.stage, std::to_string(k.threads), std::to_string(k.ranks), std::to_string(p.c->ok.size()),
                    std::to_string(p.c->all.size()), exact(p.train), exact(p.tokens), exact(p.speedup),
                    exact(p.efficiency), exact(p.share)});
  }
  return csv;
}

std::string scaling_md(const std::vector<Point>& points) {
  std::vector<std::vector<std::string>> rows;
  for (const Point& p : points) {
    const ConfigKey& k = p.c->key;
    rows.push_back({k.stage, std::to_string(k.threads), std::to_string(k.ranks),
                    fmt::format("{}/{}", p.c->ok.size(), p.c->all.size()), seconds(p.train), rate(p.tokens),
                    sig3(p.speedup), sig3(p.efficiency), percent(p.share)});
  }
  return md_table({"Stage", "Threads", "Ranks", "Runs ok", "Training s, median", "Tokens/s, median", "Speed-up",
                   "Efficiency", "Comm share of training, median"},
                  rows, "lrrrrrrrr") +
         "\nSpeed-up: median training time at the smallest rank count of the same stage and thread count, "
         "divided by the median at this rank count. Efficiency: speed-up / (ranks / smallest ranks). Comm "
         "share: median over the completed runs of comm_s / training_s.\n\n";
}

}  // namespace

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
  std::vector<Series> series;
  const std::vector<Point> points = points_of(by_series, series);
  std::string md = preamble(spec, in.runs, "scaling with MPI ranks");
  md += points.empty() ? fmt::format("Nothing to scale: {} of the mpi or mpi_cuda stages.\n\n", kNoRuns)
                       : scaling_md(points);
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
  write_report(spec.reports_dir / "scaling.csv", scaling_csv(points), written);
  write_report(spec.reports_dir / "scaling.md", md, written);
}

}  // namespace gpt2::harness
