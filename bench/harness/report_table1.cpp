// Table 1 of the paper, ours beside it: per configuration the median and
// min-max of training and inference time over the completed repetitions,
// tokens/s, final loss, the speed-up over our serial stage and the paper's
// times with their ratios to ours; table1.md, table1.csv and a runtime bar
// chart (report.h).
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

}  // namespace

void write_table1(const ReportSpec& spec, const Inputs& in, std::vector<fs::path>& written) {
  const PaperTable1 paper = load_paper_table1(spec.paper_dir);
  const ConfigRuns* serial = nullptr;
  for (const ConfigRuns& c : in.configs) {
    if (!serial && c.key.stage == "serial" && median_of(c.ok, "training_s")) serial = &c;
  }
  const std::optional<double> serial_s = serial ? median_of(serial->ok, "training_s") : std::nullopt;
  auto ratio = [](std::optional<double> num, std::optional<double> den) {
    return num && den && *den > 0 ? std::optional<double>(*num / *den) : std::nullopt;
  };

  std::string csv =
      "stage,ranks,threads,status,runs_ok,runs_total,reason,training_s_median,training_s_min,training_s_max,"
      "inference_s_median,inference_s_min,inference_s_max,tokens_per_s_median,final_loss_median,speedup_vs_serial,"
      "paper_training_s,paper_inference_s,paper_over_ours_training,paper_over_ours_inference\n";
  std::vector<std::vector<std::string>> rows;
  std::string dat = "# configuration ours_training_s_median paper_training_s\n";
  bool any_paper_bar = false;
  for (const ConfigRuns& c : in.configs) {
    const auto train = stats_of(c.ok, "training_s"), inf = stats_of(c.ok, "inference_s");
    const auto train_med = train ? std::optional(train->median) : std::nullopt;
    const auto inf_med = inf ? std::optional(inf->median) : std::nullopt;
    const auto tokens = median_of(c.ok, "tokens_per_s"), loss = median_of(c.ok, "final_loss");
    const auto speedup = ratio(serial_s, train_med);
    std::optional<double> paper_train, paper_inf;
    if (auto it = paper.by_stage.find(c.key.stage); it != paper.by_stage.end()) {
      paper_train = it->second.first;
      paper_inf = it->second.second;
    }
    const auto over_train = ratio(paper_train, train_med), over_inf = ratio(paper_inf, inf_med);
    std::vector<std::string> fields = {c.key.stage,    std::to_string(c.key.ranks), std::to_string(c.key.threads),
                                       status_word(c), std::to_string(c.ok.size()), std::to_string(c.all.size()),
                                       reasons(c)};
    for (const auto& st : {train, inf}) {
      for (double Summary::*f : {&Summary::median, &Summary::min, &Summary::max}) {
        fields.push_back(exact(st ? std::optional((*st).*f) : std::nullopt));
      }
    }
    for (const auto& x : {tokens, loss, speedup, paper_train, paper_inf, over_train, over_inf}) {
      fields.push_back(exact(x));
    }
    csv += csv_row(fields);
    rows.push_back({c.key.stage, std::to_string(c.key.ranks), std::to_string(c.key.threads), status_text(c),
                    median_range(train), median_range(inf), rate(tokens), loss4(loss), sig3(speedup),
                    seconds(paper_train), seconds(paper_inf), sig3(over_train), sig3(over_inf)});
    dat += fmt::format("{} {} {}\n", gnuplot_string(label(c.key)), train_med ? exact(train_med) : "NaN",
                       paper_train ? exact(paper_train) : "NaN");
    any_paper_bar = any_paper_bar || paper_train.has_value();
  }

  std::string md = preamble(spec, in.runs, "training and inference time per configuration (paper Table 1)");
  if (!in.any_ok) md += fmt::format("Nothing was measured here: {}.\n\n", kNoRuns);
  if (!rows.empty()) {
    md += md_table({"Stage", "Ranks", "Threads", "Status", "Training s, median [min–max]",
                    "Inference s, median [min–max]", "Tokens/s, median", "Final loss, median", "Speed-up vs serial",
                    "Paper training s", "Paper inference s", "Paper / ours, training", "Paper / ours, inference"},
                   rows, "lrrlrrrrrrrrr");
  }
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
  if (!in.any_ok) {
    md += fmt::format("(plot not drawn: {})\n", kNoRuns);
  } else {
    std::string body =
        "set title \"Training time per configuration (median; paper per stage)\" noenhanced\n"
        "set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
        "set logscale y\nset ylabel \"training time (s, log scale)\"\nset xtics noenhanced rotate by -30\n"
        "set key top right\n";
    body += "plot \"table1_runtime.dat\" using 2:xtic(1) title \"ours (median)\"";
    body += any_paper_bar ? ", \\\n    \"\" using 3 title \"paper\"\n" : "\n";
    md += draw_chart(spec.reports_dir, "table1_runtime", "Training time per configuration", dat, body, written);
  }
  write_report(spec.reports_dir / "table1.csv", csv, written);
  write_report(spec.reports_dir / "table1.md", md, written);
}

}  // namespace gpt2::harness
