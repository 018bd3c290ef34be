// Table 2 on equal terms (report.h): our four stages trained on the original
// project's corpus with its initialisation (model.init original, seed 1234),
// each curve beside the paper's curve of the same stage, with the largest
// deviation and the epoch where it occurs; a paragraph on where the paper's
// curves part and why. table2_original.md, table2_original.csv and a chart.
// The experiment (experiments/table2_original.yaml) needs the corpus, which
// is not shipped: without it the report says what to pass (report.cpp).
#include "reports/report_inputs.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <set>

#include "render/chart.h"
#include "records/csv.h"
#include "render/report_format.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

const Curve* paper_curve(const PaperTable2& paper, const std::string& stage) {
  for (const auto& [s, c] : paper.by_stage) {
    if (s == stage) return &c;
  }
  return nullptr;
}

std::optional<double> at(const Curve* c, int e) {
  if (c == nullptr) return std::nullopt;
  const auto it = c->find(e);
  return it == c->end() ? std::nullopt : std::optional(it->second);
}

// One of our curves and the paper's curve of the same stage.
struct Pair {
  std::string label, stage, id;
  const Curve* ours;
  const Curve* theirs;
};

// The loss per epoch, ours beside the paper's: the CSV and the Markdown table.
std::pair<std::string, std::string> epoch_tables(const std::vector<Pair>& pairs) {
  std::set<int> epochs;
  std::vector<std::string> header = {"epoch"}, md_header = {"Epoch"};
  for (const Pair& p : pairs) {
    for (const auto& [e, l] : *p.ours) epochs.insert(e);
    header.push_back(p.id);
    header.push_back("paper_" + p.stage);
    md_header.push_back(p.label);
    md_header.push_back("paper " + p.stage);
  }
  std::string csv = csv_row(header);
  std::vector<std::vector<std::string>> rows;
  for (int e : epochs) {
    std::vector<std::string> row = {std::to_string(e)}, md_row = {std::to_string(e)};
    for (const Pair& p : pairs) {
      for (const Curve* c : {p.ours, p.theirs}) {
        row.push_back(exact(at(c, e)));
        md_row.push_back(at(c, e) ? fmt::format("{:.6f}", *at(c, e)) : "");
      }
    }
    csv += csv_row(row);
    rows.push_back(md_row);
  }
  return {csv, md_table(md_header, rows, std::string(md_header.size(), 'r'))};
}

// Each curve's largest deviation from the paper's same stage and from our serial curve.
std::string deviations_md(const std::vector<Pair>& pairs, const Curve* our_serial) {
  std::vector<std::vector<std::string>> rows;
  for (const Pair& p : pairs) {
    const auto vs_paper = p.theirs ? max_deviation(*p.ours, *p.theirs) : std::nullopt;
    const auto vs_serial = our_serial ? max_deviation(*p.ours, *our_serial) : std::nullopt;
    auto cell = [](const std::optional<std::pair<double, int>>& d) {
      return d ? std::pair(fmt::format("{:.2e}", d->first), std::to_string(d->second))
               : std::pair(std::string(), std::string());
    };
    const auto [dp, ep] = cell(vs_paper);
    const auto [ds, es] = cell(vs_serial);
    rows.push_back({p.label, p.theirs ? "paper " + p.stage : "(no paper curve)", dp, ep, ds, es,
                    at(p.ours, 0) ? fmt::format("{:.6f}", *at(p.ours, 0)) : "",
                    at(p.theirs, 0) ? fmt::format("{:.6f}", *at(p.theirs, 0)) : ""});
  }
  return md_table({"Curve", "Against", "Max |ours - paper|", "At epoch", "Max |ours - our serial|", "At epoch",
                   "Epoch 0, ours", "Epoch 0, paper"},
                  rows, "llrrrrrr");
}

// Their corpus with their initialisation gives their epoch-0 loss (DESIGN.md): a gap there means other data.
std::string epoch0_note(const Curve* our_serial, const Curve* theirs) {
  const auto ours0 = at(our_serial, 0), theirs0 = at(theirs, 0);
  if (!ours0 || !theirs0) return "";
  if (std::fabs(*ours0 - *theirs0) > 1e-3) {
    return fmt::format(
        "Epoch 0 differs from the paper's ({:.6f} against {:.6f}): this corpus is not the original's, which with "
        "this initialisation gives 5.168034 (their word tokenizer: V = 172, 52,601 tokens). The curves above are "
        "then not on equal terms; the deviations between our own stages still are.\n\n", *ours0, *theirs0);
  }
  return fmt::format("Epoch 0 agrees with the paper's to {:.1e}: the same data and initialisation.\n\n",
                     std::fabs(*ours0 - *theirs0));
}

const char* kWhereTheyPart =
    "**Where the paper's curves part, and why** (DESIGN.md, from their code). With the same corpus, tokenizer, "
    "data order, optimizer and initialisation, our four stages compute one function, so their curves agree to "
    "float rounding. The paper's do not:\n"
    "- **Their MPI stage** splits the attention heads across ranks that hold different sequences, which computes "
    "another function: its curve departs at epoch 0 (5.2012 against 5.1680).\n"
    "- **Their MPI+CUDA stage** divides the gradients by the world size twice, which loosens the gradient clip: "
    "it starts with serial (epoch 0 agrees to 2e-6) and drifts as the clip acts differently.\n"
    "- **Their serial stage** sums the squared gradients for the clip norm in one float32 running sum over "
    "10.9 M terms. The sum loses precision, so even their serial curve drifts from exact arithmetic from epoch "
    "1; their CUDA stage stays within about 1e-3 of serial for the first epochs.\n"
    "So the deviation of our serial curve from theirs measures their float32 norm; that of our MPI curve from "
    "theirs, mostly their head split.\n\n";

// Ours solid, the paper's dashed.
std::string curves_chart(const ReportSpec& spec, const std::vector<Pair>& pairs, std::vector<fs::path>& written) {
  std::vector<Series> series;
  for (const Pair& p : pairs) {
    Series s{p.label, {}, false};
    for (const auto& [e, l] : *p.ours) s.points[e] = l;
    series.push_back(std::move(s));
    if (p.theirs) {
      Series t{"paper " + p.stage, {}, true};
      for (const auto& [e, l] : *p.theirs) t.points[e] = l;
      series.push_back(std::move(t));
    }
  }
  const std::string body =
      "set title \"Loss per epoch, original corpus and initialisation (ours solid, paper dashed)\"\n"
      "set xlabel \"epoch\"\nset ylabel \"loss\"\nset key top right\n" +
      line_chart_plot("table2_original_loss", series, "lines");
  return draw_chart(spec.reports_dir, "table2_original_loss", "Loss per epoch", line_chart_data("epoch", series),
                    body, written);
}

}  // namespace

void write_table2_original(const ReportSpec& spec, const Inputs& in, std::vector<fs::path>& written) {
  const LossData ours = load_loss(spec.results_dir / "loss.csv", in.runs);
  const PaperTable2 paper = load_paper_table2(spec.paper_dir);
  const Curve* our_serial = nullptr;
  std::vector<Pair> pairs;
  std::vector<std::string> without;
  for (const ConfigRuns& c : in.configs) {
    const auto it = ours.median.find(c.key);
    if (it == ours.median.end()) {
      without.push_back(fmt::format("{} ({})", label(c.key), status_text(c)));
      continue;
    }
    if (c.key.stage == "serial" && !our_serial) our_serial = &it->second;
    pairs.push_back({label(c.key), c.key.stage, column_id(c.key), &it->second, paper_curve(paper, c.key.stage)});
  }
  const auto [csv, epochs_md] = epoch_tables(pairs);
  std::string md = preamble(spec, in.runs, "Table 2 on equal terms: the original's corpus and initialisation");
  if (!paper.found) md += fmt::format("Paper figures not found: {}.\n\n", paper.path.generic_string());
  if (pairs.empty()) {
    md += fmt::format("No loss curves of ours: {}.\n\n", kNoRuns);
  } else {
    md += "Loss per epoch: each of our stages (median over its repetitions) beside the paper's same stage.\n\n";
    md += epochs_md;
    md +=
        "\nLargest deviation of each of our curves from the paper's curve of the same stage, and from our serial "
        "curve, over the epochs both have, with the epoch where it occurs:\n\n";
    md += deviations_md(pairs, our_serial) + "\n";
    md += epoch0_note(our_serial, paper_curve(paper, "serial"));
  }
  md += joined("No loss curve for: ", without);
  md += kWhereTheyPart;
  if (!pairs.empty()) md += curves_chart(spec, pairs, written);
  write_report(spec.reports_dir / "table2_original.csv", csv, written);
  write_report(spec.reports_dir / "table2_original.md", md, written);
}

}  // namespace gpt2::harness
