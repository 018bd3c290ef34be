// Reports of the experiment harness: turns results/<exp>/runs.csv and
// loss.csv into Markdown and CSV tables (and gnuplot charts) under
// reports/<exp>, next to the paper's published figures (data/paper).
// Reports summarise; they never run anything but gnuplot, and a missing
// gnuplot, a missing loss.csv or a run with no completed repetitions only
// changes what the reports say.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace gpt2::harness {

struct ReportSpec {
  std::string experiment;             // e.g. "table1"
  std::string description;            // one paragraph from the experiment file
  std::vector<std::string> kinds;     // any of report_kinds()
  std::filesystem::path results_dir;  // results/<exp>: runs.csv, loss.csv
  std::filesystem::path reports_dir;  // reports/<exp>: created if missing
  std::filesystem::path paper_dir;    // data/paper: paper_table1.csv, paper_table2.csv, README.md
  std::string reproduce_command;      // e.g. "build/bench/harness run experiments/table1.yaml"
  std::string skip_reason;            // the experiment was skipped (its `needs:`): each report says why
};

// The report kinds a stage experiment may ask for, in the order they are
// documented: "table1", "table2", "scaling", "tensor_parallel". The one list: the experiment
// reader validates `reports:` against it and write_reports dispatches on it.
const std::vector<std::string>& report_kinds();
// "table1, table2, scaling or tensor_parallel", for error messages.
std::string report_kinds_text();

// Writes runs.md and, per kind, <kind>.md, <kind>.csv and the chart files
// (<chart>.dat, <chart>.gp and, where gnuplot drew it, <chart>.svg); every
// file is written to "<name>.tmp" and renamed into place. Returns the files
// written. Throws std::invalid_argument for an unknown kind (before writing
// anything) and std::runtime_error for unreadable or malformed inputs.
std::vector<std::filesystem::path> write_reports(const ReportSpec& spec);

}  // namespace gpt2::harness
