// Table 1 of the paper, ours beside it: per configuration the median and
// min-max of training and inference time over the completed repetitions,
// tokens/s, final loss, the speed-up over our serial stage and the paper's
// times with their ratios to ours; table1.md, table1.csv and a runtime bar
// chart (report.h).
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

struct PaperTable1 {
  fs::path path;
  bool found = false;
  std::map<std::string, std::pair<double, double>> by_stage;  // stage -> (training s, inference s)
};

PaperTable1 load_paper_table1(const fs::path& dir) {
  PaperTable1 p;
  p.path = dir / "paper_table1.csv";
  if (!fs::exists(p.path)) return p;
  p.found = true;
  const CsvTable t = read_csv(p.path);
  const size_t c_stage = column(t, "stage", p.path), c_train = column(t, "training_s", p.path),
               c_inf = column(t, "inference_s", p.path);
  for (size_t k = 1; k < t.size(); ++k) {
    auto train = parse_number(t[k][c_train], p.path, k, "training_s");
    auto inf = parse_number(t[k][c_inf], p.path, k, "inference_s");
    if (train && inf) p.by_stage[t[k][c_stage]] = {*train, *inf};
  }
  return p;
}

std::optional<double> ratio(std::optional<double> num, std::optional<double> den) {
  return num && den && *den > 0 ? std::optional<double>(*num / *den) : std::nullopt;
}

// One configuration's figures beside the paper's for its stage: the tidy row.
struct ConfigRow {
  const ConfigRuns* c = nullptr;
  std::optional<Summary> train, inf;
  std::optional<double> train_med, inf_med, tokens, loss, speedup, paper_train, paper_inf, over_train, over_inf;
};

ConfigRow row_of(const ConfigRuns& c, std::optional<double> serial_s, const PaperTable1& paper) {
  ConfigRow r;
  r.c = &c;
  r.train = stats_of(c.ok, "training_s");
  r.inf = stats_of(c.ok, "inference_s");
  r.train_med = r.train ? std::optional(r.train->median) : std::nullopt;
  r.inf_med = r.inf ? std::optional(r.inf->median) : std::nullopt;
  r.tokens = median_of(c.ok, "tokens_per_s");
  r.loss = median_of(c.ok, "final_loss");
  r.speedup = ratio(serial_s, r.train_med);
  if (auto it = paper.by_stage.find(c.key.stage); it != paper.by_stage.end()) {
    r.paper_train = it->second.first;
    r.paper_inf = it->second.second;
  }
  r.over_train = ratio(r.paper_train, r.train_med);
  r.over_inf = ratio(r.paper_inf, r.inf_med);
  return r;
}

std::string table1_csv(const std::vector<ConfigRow>& rows) {
  std::string csv =
      "stage,ranks,threads,status,runs_ok,runs_total,reason,training_s_median,training_s_min,training_s_max,"
      "inference_s_median,inference_s_min,inference_s_max,tokens_per_s_median,final_loss_median,speedup_vs_serial,"
      "paper_training_s,paper_inference_s,paper_over_ours_training,paper_over_ours_inference\n";
  for (const ConfigRow& r : rows) {
    const ConfigRuns& c = *r.c;
    std::vector<std::string> fields = {c.key.stage,    std::to_string(c.key.ranks), std::to_string(c.key.threads),
                                       status_word(c), std::to_string(c.ok.size()), std::to_string(c.all.size()),
                                       reasons(c)};
    for (const auto& st : {r.train, r.inf}) {
      for (double Summary::*f : {&Summary::median, &Summary::min, &Summary::max}) {
        fields.push_back(exact(st ? std::optional((*st).*f) : std::nullopt));
      }
    }
    for (const auto& x : {r.tokens, r.loss, r.speedup, r.paper_train, r.paper_inf, r.over_train, r.over_inf}) {
      fields.push_back(exact(x));
    }
    csv += csv_row(fields);
  }
  return csv;
}

std::string table1_md(const std::vector<ConfigRow>& rows) {
  std::vector<std::vector<std::string>> cells;
  for (const ConfigRow& r : rows) {
    const ConfigRuns& c = *r.c;
    cells.push_back({c.key.stage, std::to_string(c.key.ranks), std::to_string(c.key.threads), status_text(c),
                     median_range(r.train), median_range(r.inf), rate(r.tokens), loss4(r.loss), sig3(r.speedup),
                     seconds(r.paper_train), seconds(r.paper_inf), sig3(r.over_train), sig3(r.over_inf)});
  }
  return md_table({"Stage", "Ranks", "Threads", "Status", "Training s, median [min–max]",
                   "Inference s, median [min–max]", "Tokens/s, median", "Final loss, median", "Speed-up vs serial",
                   "Paper training s", "Paper inference s", "Paper / ours, training", "Paper / ours, inference"},
                  cells, "lrrlrrrrrrrrr");
}

// Bars of our median training time beside the paper's per configuration.
std::string runtime_chart(const ReportSpec& spec, const std::vector<ConfigRow>& rows, std::vector<fs::path>& written) {
  std::string dat = "# configuration ours_training_s_median paper_training_s\n";
  bool any_paper_bar = false;
  for (const ConfigRow& r : rows) {
    dat += fmt::format("{} {} {}\n", gnuplot_string(label(r.c->key)), r.train_med ? exact(r.train_med) : "NaN",
                       r.paper_train ? exact(r.paper_train) : "NaN");
    any_paper_bar = any_paper_bar || r.paper_train.has_value();
  }
  std::string body =
      "set title \"Training time per configuration (median; paper per stage)\" noenhanced\n"
      "set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
      "set logscale y\nset ylabel \"training time (s, log scale)\"\nset xtics noenhanced rotate by -30\n"
      "set key top right\n";
  body += "plot \"table1_runtime.dat\" using 2:xtic(1) title \"ours (median)\"";
  body += any_paper_bar ? ", \\\n    \"\" using 3 title \"paper\"\n" : "\n";
  return draw_chart(spec.reports_dir, "table1_runtime", "Training time per configuration", dat, body, written);
}

}  // namespace

void write_table1(const ReportSpec& spec, const Inputs& in, std::vector<fs::path>& written) {
  const PaperTable1 paper = load_paper_table1(spec.paper_dir);
  const ConfigRuns* serial = nullptr;
  for (const ConfigRuns& c : in.configs) {
    if (!serial && c.key.stage == "serial" && median_of(c.ok, "training_s")) serial = &c;
  }
  const std::optional<double> serial_s = serial ? median_of(serial->ok, "training_s") : std::nullopt;
  std::vector<ConfigRow> rows;
  for (const ConfigRuns& c : in.configs) rows.push_back(row_of(c, serial_s, paper));
  std::string md = preamble(spec, in.runs, "training and inference time per configuration (paper Table 1)");
  if (!in.any_ok) md += fmt::format("Nothing was measured here: {}.\n\n", kNoRuns);
  if (!rows.empty()) md += table1_md(rows);
  md += "\n";
  md += serial ? fmt::format("Speed-up: median training time of our {} divided by the configuration's. ",
                             label(serial->key))
               : "No serial configuration completed here, so no speed-up is given. ";
  md += "Paper / ours above 1 means this machine trained or generated faster than the paper's.\n\n";
  md += fmt::format(
      "The paper's times come from its own machines and software, which differ from ours (see {}); they are "
      "points of comparison, not targets.",
      paper_readme_link(spec.paper_dir, spec.reports_dir));
  if (!paper.found) md += fmt::format(" (Paper figures not found: {}.)", paper.path.generic_string());
  md += " A skipped configuration was not run on this machine (the status gives the reason); it did not fail.\n\n";
  md += in.any_ok ? runtime_chart(spec, rows, written) : fmt::format("(plot not drawn: {})\n", kNoRuns);
  write_report(spec.reports_dir / "table1.csv", table1_csv(rows), written);
  write_report(spec.reports_dir / "table1.md", md, written);
}

}  // namespace gpt2::harness
