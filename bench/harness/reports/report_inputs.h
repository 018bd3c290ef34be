// What the stage experiments' reports share (report.h's write_reports and
// one file per report: report_table1.cpp, report_table2.cpp,
// report_scaling.cpp, report_tensor_parallel.cpp): the runs of runs.csv grouped into configurations
// (stage, ranks, threads, layout), statistics over a configuration's completed
// repetitions (util/stats.h), the median loss curves of loss.csv, and the
// text every report starts with (title, description, the machines, the
// reproduce command). Internal to the reports; reads only what the runner
// recorded (tables.h).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reports/report.h"
#include "records/tables.h"
#include "util/stats.h"

namespace gpt2::harness {

inline constexpr const char* kNoRuns = "no completed runs";

// Position of a stage in report order (serial, mpi, cuda, mpi_cuda).
int stage_index(const std::string& stage);

// A row of runs.csv as the reports read it: a commit that `git describe
// --dirty` marked keeps the flag, not the suffix.
struct Run : RunRow {
  bool dirty = false;
  // Where runs of one stage, ranks, threads and layout were given different
  // configurations (config_digest): the keys this run's configuration sets
  // apart from the others', "optimizer.lr=0.001 train.steps=50" (read from
  // the runs' run.yaml), so that their rows are told apart; "" otherwise.
  std::string differs;
  bool ok() const { return status == "ok"; }
};
// The runs of a runs.csv, with Run::differs worked out from the run folders
// beside it.
std::vector<Run> load_runs(const std::filesystem::path& path);

struct ConfigKey {
  std::string stage;
  int ranks = 0, threads = 0;
  int tp = 1;               // the tensor-parallel layout: ranks = tp x dp
  std::string block_types;  // "" for all tp (and always at tp 1)
  std::string pipeline;     // context parallelism, pipeline stages, microbatches, schedule, ZeRO: "cp2 pp2 m4 1f1b zero"; "" for none
  std::string variant;      // the architecture keys that differ from GPT-2: "arch=llama"; "" for none
  std::string config_digest;  // the resolved configuration but train.seed; "" in older results
  std::string differs;        // Run::differs: shown in the label where it is not ""
  bool operator<(const ConfigKey& o) const;
  bool operator==(const ConfigKey& o) const = default;
};
// "mpi r2 t1" and "mpi_r2_t1" (a CSV column name); a tensor-parallel layout
// adds its groups and block types: "mpi r2 t1 tp2 (all spd)", "mpi_r2_t1_tp2_spd".
std::string label(const ConfigKey& k);
std::string column_id(const ConfigKey& k);
// The block types in a few words: "all tp", "all spd", "tp,parallel,parallel,spd".
std::string block_types_text(const ConfigKey& k);

// One configuration's runs: all of them, and the completed ones.
struct ConfigRuns {
  ConfigKey key;
  std::vector<const Run*> all, ok;
};

struct Inputs {
  std::vector<Run> runs;
  std::vector<ConfigRuns> configs;  // in report order: stage, then ranks, then threads
  bool any_ok = false;
};
Inputs load_inputs(const std::filesystem::path& runs_csv);

// The configurations in the order the experiment lists them (runs.csv's
// order of their first runs), not by key: the layouts or variants read as the
// experiment file sets them out.
std::vector<const ConfigRuns*> in_run_order(const Inputs& in);

// Statistics of one column over runs (those with a value).
std::optional<Summary> stats_of(const std::vector<const Run*>& runs, const std::string& counter);
std::optional<double> median_of(const std::vector<const Run*>& runs, const std::string& counter);

using Curve = std::map<int, double>;  // epoch -> loss

// Median loss per epoch over the completed repetitions of each configuration.
// Rows of runs that are not ok in runs.csv (or absent from it) are ignored.
struct LossData {
  bool found = false;  // loss.csv exists
  std::map<ConfigKey, Curve> median;
  std::map<ConfigKey, Curve> val_median;  // validation loss at the steps where the runs evaluated
};
LossData load_loss(const std::filesystem::path& path, const std::vector<Run>& runs);

// "ok 3/3", "ok 2/3; failed 1/3: <reason>", "ok 1/3; not run 2/3", "skipped: <reason>":
// out of the planned repetitions (runs.csv lists the runs not run yet too).
std::string status_text(const ConfigRuns& c);
// One word for the CSV: ok, partial (some repetitions not ok), failed, skipped, not run.
std::string status_word(const ConfigRuns& c);
// The distinct reasons of the runs that are not ok, "; "-separated.
std::string reasons(const ConfigRuns& c);

// "# <exp>: <title>", the description, the machines the completed runs ran
// on, and the command that reproduces the report.
std::string preamble(const ReportSpec& spec, const std::vector<Run>& runs, const std::string& title);
// The same with `lead` in place of the experiment's description: for a
// report whose subject is not the experiment's (table1's Table 2).
std::string preamble(const ReportSpec& spec, const std::vector<Run>& runs, const std::string& title,
                     const std::string& lead);
// A Markdown link from the reports folder to the paper's README, shown as
// "data/paper/README.md" (the last two folders) wherever the tree lies.
std::string paper_readme_link(const std::filesystem::path& paper_dir, const std::filesystem::path& reports_dir);

// The paper's Table 2 (data/paper/paper_table2.csv): a loss curve per stage.
struct PaperTable2 {
  std::filesystem::path path;
  bool found = false;
  std::vector<std::pair<std::string, Curve>> by_stage;  // in the file's column order
};
PaperTable2 load_paper_table2(const std::filesystem::path& paper_dir);
// Max |a - b| over the epochs both curves have, and that epoch.
std::optional<std::pair<double, int>> max_deviation(const Curve& a, const Curve& b);

// One report each (report_<kind>.cpp): <kind>.md, <kind>.csv and a chart.
void write_table1(const ReportSpec& spec, const Inputs& in, std::vector<std::filesystem::path>& written);
void write_table2(const ReportSpec& spec, const Inputs& in, std::vector<std::filesystem::path>& written);
void write_scaling(const ReportSpec& spec, const Inputs& in, std::vector<std::filesystem::path>& written);
void write_tensor_parallel(const ReportSpec& spec, const Inputs& in, std::vector<std::filesystem::path>& written);
void write_parallelism(const ReportSpec& spec, const Inputs& in, std::vector<std::filesystem::path>& written);
void write_table2_original(const ReportSpec& spec, const Inputs& in, std::vector<std::filesystem::path>& written);
void write_ablation(const ReportSpec& spec, const Inputs& in, std::vector<std::filesystem::path>& written);

}  // namespace gpt2::harness
