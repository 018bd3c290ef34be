// The stage experiments' reports (see report.h): runs.md here, then each
// requested kind from its own file (report_table1.cpp, report_table2.cpp,
// report_scaling.cpp, report_tensor_parallel.cpp) over the inputs they share (report_inputs.h). Reports
// do not decide what was run or how; they only read what the runner recorded.
#include "reports/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "render/report_format.h"
#include "reports/report_inputs.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

using Writer = void (*)(const ReportSpec&, const Inputs&, std::vector<fs::path>&);
struct Kind {
  std::string name;
  Writer write;
};
// Every report kind and the file that writes it: a new kind is one line here.
const std::vector<Kind>& kinds_table() {
  static const std::vector<Kind> table = {
      {"table1", write_table1}, {"table2", write_table2}, {"scaling", write_scaling},
      {"tensor_parallel", write_tensor_parallel},
      {"parallelism", write_parallelism},
      {"table2_original", write_table2_original},
      {"ablation", write_ablation}};
  return table;
}

const Kind* find_kind(const std::string& name) {
  for (const Kind& k : kinds_table()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

void write_runs(const ReportSpec& spec, const Inputs& in, std::vector<fs::path>& written) {
  std::string md = preamble(spec, in.runs, "every run");
  if (in.runs.empty()) md += "No runs recorded.\n";
  if (!in.any_ok && !in.runs.empty()) md += fmt::format("Every run was skipped, failed or not run yet: {}.\n\n", kNoRuns);
  // A layout column only where a run is tensor-parallel: other experiments' runs.md stay as they were.
  const bool layouts = std::any_of(in.runs.begin(), in.runs.end(), [](const Run& r) { return r.tp > 1; });
  std::vector<std::vector<std::string>> rows;
  for (const Run& r : in.runs) {
    std::vector<std::string> row = {r.run_id, r.stage, std::to_string(r.ranks), std::to_string(r.threads)};
    if (layouts) {
      const ConfigKey k{r.stage, r.ranks, r.threads, r.tp, r.block_types, r.pipeline, r.variant};
      row.push_back(r.tp > 1 ? fmt::format("tp{} ({})", r.tp, block_types_text(k)) : "standard");
    }
    row.insert(row.end(), {std::to_string(r.repetition), r.status, r.reason, seconds(r.get("training_s")),
                           seconds(r.get("inference_s")), rate(r.get("tokens_per_s")), loss4(r.get("final_loss"))});
    rows.push_back(std::move(row));
  }
  if (!rows.empty()) {
    std::vector<std::string> header = {"Run", "Stage", "Ranks", "Threads"};
    if (layouts) header.push_back("Layout");
    header.insert(header.end(), {"Repetition", "Status", "Reason", "Training s", "Inference s", "Tokens/s", "Final loss"});
    md += md_table(header, rows, layouts ? "llrrlrllrrrr" : "llrrrllrrrr");
  }
  write_report(spec.reports_dir / "runs.md", md, written);
}

}  // namespace

const std::vector<std::string>& report_kinds() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Kind& k : kinds_table()) v.push_back(k.name);
    return v;
  }();
  return names;
}

std::string report_kinds_text() {
  const std::vector<std::string>& k = report_kinds();
  std::string out;
  for (size_t i = 0; i < k.size(); ++i) out += (i == 0 ? "" : i + 1 == k.size() ? " or " : ", ") + k[i];
  return out;
}

std::vector<fs::path> write_reports(const ReportSpec& spec) {
  std::vector<const Kind*> kinds;
  for (const std::string& name : spec.kinds) {
    const Kind* k = find_kind(name);
    if (k == nullptr) {
      throw std::invalid_argument(fmt::format("experiment {}: unknown report kind '{}' (expected {})", spec.experiment,
                                              name, report_kinds_text()));
    }
    if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
  }
  make_reports_dir(spec.reports_dir);
  std::vector<fs::path> written;
  if (!spec.skip_reason.empty()) {
    for (const Kind* k : kinds) {
      write_report(spec.reports_dir / (k->name + ".md"),
                   preamble(spec, {}, k->name) + fmt::format("Skipped: this experiment {}.\n", spec.skip_reason),
                   written);
    }
    return written;
  }
  const Inputs in = load_inputs(spec.results_dir / "runs.csv");

  write_runs(spec, in, written);
  for (const Kind* k : kinds) k->write(spec, in, written);
  return written;
}

}  // namespace gpt2::harness
