// Table 2 of the paper, ours beside it: the median loss per epoch of each
// configuration and the paper's loss per stage, each curve's largest
// deviation from its own source's serial curve, and a loss chart; table2.md,
// table2.csv, table2_summary.csv (report.h).
#include "reports/report_inputs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "render/chart.h"
#include "records/csv.h"
#include "render/report_format.h"
#include "records/run_plan.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

PaperTable2 load_paper_table2(const fs::path& dir) {
  PaperTable2 p;
  p.path = dir / "paper_table2.csv";
  if (!fs::exists(p.path)) return p;
  p.found = true;
  const CsvTable t = read_csv(p.path);
  const size_t c_epoch = column(t, "epoch", p.path);
  for (size_t c = 0; c < t[0].size(); ++c) {
    if (c == c_epoch) continue;
    Curve curve;
    for (size_t k = 1; k < t.size(); ++k) {
      auto loss = parse_number(t[k][c], p.path, k, t[0][c]);
      if (loss) curve[static_cast<int>(parse_integer(t[k][c_epoch], p.path, k, "epoch"))] = *loss;
    }
    p.by_stage.emplace_back(t[0][c], std::move(curve));
  }
  return p;
}

// Max |a - b| over the epochs both curves have, and that epoch.
std::optional<std::pair<double, int>> max_deviation(const Curve& a, const Curve& b) {
  std::optional<std::pair<double, int>> worst;
  for (const auto& [epoch, loss] : a) {
    auto it = b.find(epoch);
    if (it == b.end()) continue;
    const double d = std::fabs(loss - it->second);
    if (!worst || d > worst->first) worst = std::pair(d, epoch);
  }
  return worst;
}

namespace {

// Our corpus as the first completed run's plan names it: "tiny_tales.txt
// (64,127 word tokens, a vocabulary of 265)", or "" without a plan.
std::string our_corpus(const ReportSpec& spec, const Inputs& in) {
  for (const Run& r : in.runs) {
    if (!r.ok()) continue;
    const std::optional<Json> plan = read_plan(spec.results_dir / r.run_id);
    if (!plan || !plan->contains("data")) continue;
    const Json& d = (*plan)["data"];
    const std::string digits = std::to_string(d["tokens"].get<int64_t>());
    std::string tokens;  // with thousands separators
    for (size_t k = 0; k < digits.size(); ++k) {
      if (k > 0 && (digits.size() - k) % 3 == 0) tokens += ',';
      tokens += digits[k];
    }
    return fmt::format("`{}` ({} {} tokens, a vocabulary of {})",
                       fs::path(d["corpus"].get<std::string>()).filename().string(), tokens,
                       d["tokenizer"].get<std::string>(), (*plan)["vocab"].get<int64_t>());
  }
  return "";
}

// What the report compares, and what it cannot: the two sources trained on different text.
// `finals`: the last losses of our serial curve and the paper's ("" when absent).
std::string table2_lead(const std::string& ours, const std::string& finals) {
  return fmt::format(
      "Training loss per epoch (one optimizer step on one global batch) of each of our configurations, beside "
      "the paper's Table 2 (its loss per stage).\n\n"
      "The two sources trained on different text, so the levels of their curves cannot be compared. Ours: {}, "
      "the stories generated for this project (data/README.md). The paper's: the original project's own corpus "
      "(not shipped; V = 172 over 52,601 tokens), a few distinct lines repeated, which a model of this size "
      "nearly learns by heart: hence its lower loss ({}), not a better model. What can be compared is the shape of each curve, and stage against stage within one source: our "
      "stages compute one function, so their curves coincide (the deviation table); the paper's part (its MPI "
      "stage from epoch 0, splitting heads across ranks that hold different sequences; its MPI+CUDA stage "
      "divides the gradient twice). The comparison on equal terms, every stage on their corpus with their "
      "initialisation beside their curves, is the table2_original experiment: `build/bench/harness run "
      "experiments/table2_original.yaml --set data.corpus=PATH`.",
      ours.empty() ? "the corpus of each run's configuration" : ours, finals.empty() ? "at every epoch" : finals);
}

}  // namespace

namespace {

// A loss curve of ours (a configuration's median) or the paper's (a stage's).
struct NamedCurve {
  std::string label, column_id, stage;
  const Curve* curve;
  bool paper;
};

// Ours in report order, then the paper's.
std::vector<NamedCurve> curves_of(const Inputs& in, const LossData& ours, const PaperTable2& paper) {
  std::vector<NamedCurve> curves;
  for (const ConfigRuns& c : in.configs) {
    auto it = ours.median.find(c.key);
    if (it != ours.median.end()) curves.push_back({label(c.key), column_id(c.key), c.key.stage, &it->second, false});
  }
  for (const auto& [stage, curve] : paper.by_stage) {
    curves.push_back({fmt::format("paper {}", stage), fmt::format("paper_{}", stage), stage, &curve, true});
  }
  return curves;
}

// The loss per epoch of every curve: the CSV and the Markdown table.
std::pair<std::string, std::string> epoch_tables(const std::vector<NamedCurve>& curves) {
  std::set<int> epochs;
  std::vector<std::string> header = {"epoch"}, md_header = {"Epoch"};
  for (const NamedCurve& c : curves) {
    for (const auto& [e, l] : *c.curve) epochs.insert(e);
    header.push_back(c.column_id);
    md_header.push_back(c.label);
  }
  std::string csv = csv_row(header);
  std::vector<std::vector<std::string>> rows;
  for (int e : epochs) {
    std::vector<std::string> row = {std::to_string(e)}, md_row = {std::to_string(e)};
    for (const NamedCurve& c : curves) {
      auto it = c.curve->find(e);
      const auto loss = it == c.curve->end() ? std::nullopt : std::optional(it->second);
      row.push_back(exact(loss));
      md_row.push_back(loss4(loss));
    }
    csv += csv_row(row);
    rows.push_back(md_row);
  }
  return {csv, md_table(md_header, rows, std::string(md_header.size(), 'r'))};
}

// Each curve against the first serial curve of its own source: the summary
// CSV and the Markdown table; and the chart's series.
struct Deviations {
  std::string csv, md;
  std::vector<Series> series;
};

Deviations deviations_of(const std::vector<NamedCurve>& curves, const NamedCurve* our_ref,
                         const NamedCurve* paper_ref) {
  Deviations d;
  d.csv = "curve,source,reference,max_abs_deviation,at_epoch,final_epoch,final_loss\n";
  std::vector<std::vector<std::string>> rows;
  for (const NamedCurve& c : curves) {
    const NamedCurve* ref = c.paper ? paper_ref : our_ref;
    const auto dev = ref ? max_deviation(*c.curve, *ref->curve) : std::nullopt;
    const auto dev_v = dev ? std::optional(dev->first) : std::nullopt;
    const std::string at_epoch = dev ? std::to_string(dev->second) : "";
    const auto final_loss = c.curve->empty() ? std::nullopt : std::optional(c.curve->rbegin()->second);
    const std::string final_epoch = c.curve->empty() ? "" : std::to_string(c.curve->rbegin()->first);
    d.csv += csv_row({c.label, c.paper ? "paper" : "ours", ref ? ref->label : "", exact(dev_v), at_epoch, final_epoch,
                      exact(final_loss)});
    rows.push_back({c.label, ref ? ref->label : "(no serial curve)", dev ? fmt::format("{:.4f}", *dev_v) : "",
                    at_epoch, final_epoch, loss4(final_loss)});
    Series s{c.label, {}, c.paper};
    for (const auto& [e, l] : *c.curve) s.points[e] = l;
    if (!s.points.empty()) d.series.push_back(std::move(s));
  }
  d.md = md_table({"Curve", "Against", "Max |loss - serial|", "At epoch", "Last epoch", "Final loss"}, rows, "llrrrr");
  return d;
}

}  // namespace

void write_table2(const ReportSpec& spec, const Inputs& in, std::vector<fs::path>& written) {
  const LossData ours = load_loss(spec.results_dir / "loss.csv", in.runs);
  const PaperTable2 paper = load_paper_table2(spec.paper_dir);
  const std::vector<NamedCurve> curves = curves_of(in, ours, paper);
  const NamedCurve *our_ref = nullptr, *paper_ref = nullptr;  // each source's first serial curve
  for (const NamedCurve& c : curves) {
    const NamedCurve*& ref = c.paper ? paper_ref : our_ref;
    if (!ref && c.stage == "serial") ref = &c;
  }
  const auto [csv, epochs_md] = epoch_tables(curves);
  const Deviations dev = deviations_of(curves, our_ref, paper_ref);
  std::string finals;
  if (our_ref && paper_ref && !our_ref->curve->empty() && !paper_ref->curve->empty()) {
    finals = fmt::format("{} at its last epoch against our {}", loss4(paper_ref->curve->rbegin()->second),
                         loss4(our_ref->curve->rbegin()->second));
  }
  std::string md = preamble(spec, in.runs, "training loss per epoch (paper Table 2)",
                            table2_lead(our_corpus(spec, in), finals));
  if (!in.any_ok) {
    md += fmt::format("No loss curves of ours: {}.\n\n", kNoRuns);
  } else if (!ours.found) {
    md += fmt::format("No loss.csv in {}: no loss curves of ours.\n\n", spec.results_dir.generic_string());
  }
  if (!paper.found) md += fmt::format("Paper figures not found: {}.\n\n", paper.path.generic_string());
  if (!curves.empty()) {
    md += "Median loss over the completed repetitions of each configuration, then the paper's loss per stage.\n\n";
    md += epochs_md;
    md +=
        "\nLargest deviation from the serial curve (ours against our serial configuration, the paper's against "
        "the paper's serial stage) over the epochs both have, and the loss at the last epoch:\n\n";
    md += dev.md + "\n";
  }
  std::vector<std::string> without;
  for (const ConfigRuns& c : in.configs) {
    if (!ours.median.count(c.key)) without.push_back(fmt::format("{} ({})", label(c.key), status_text(c)));
  }
  md += joined("No loss curve for: ", without);
  md += fmt::format("The paper's runs also used other machines and another initialisation (see {}).\n\n",
                    paper_readme_link(spec.paper_dir, spec.reports_dir));
  const bool any_ours = std::any_of(curves.begin(), curves.end(), [](const NamedCurve& c) { return !c.paper; });
  if (!any_ours) {
    md += fmt::format("(plot not drawn: {})\n", kNoRuns);
  } else {
    const std::string body =
        "set title \"Training loss per epoch (ours solid, paper dashed)\"\n"
        "set xlabel \"epoch\"\nset ylabel \"loss\"\nset key top right\n" +
        line_chart_plot("table2_loss", dev.series, "lines");
    md += draw_chart(spec.reports_dir, "table2_loss", "Loss per epoch", line_chart_data("epoch", dev.series), body,
                     written);
  }
  write_report(spec.reports_dir / "table2.csv", csv, written);
  write_report(spec.reports_dir / "table2_summary.csv", dev.csv, written);
  write_report(spec.reports_dir / "table2.md", md, written);
}

}  // namespace gpt2::harness
