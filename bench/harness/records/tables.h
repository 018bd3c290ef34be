// The harness's own tidy CSV files, each defined once: a row struct, its
// column list, a writer and a reader, used by the runners (writing) and the
// reports (reading). The reader finds columns by name, so their order and
// extra columns do not matter, and a column added later (runs.csv's
// `backend`) may be missing from older files; every other column must be
// there. Empty cells are "no value" (a run that did not complete has no
// times).
//
//   results/<exp>/runs.csv      one row per stage run          RunRow
//   results/<exp>/loss.csv      one row per (run, epoch)       LossRow
//   results/<exp>/programs.csv  one row per benchmark program  JobRow, label column "program"
//   results/<exp>/jobs.csv      one row per peer or MPI job    JobRow, label column "job"
//
// The metrics stream each run writes is not here: it is util/records.h's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gpt2::harness {

// The stage programs, in report order: what RunRow::stage may name.
inline const std::vector<std::string> kStages = {"serial", "mpi", "cuda", "mpi_cuda"};

// A run's numbers, measured or planned, by name: the counter columns of
// runs.csv, written in the order of run_counters(). A new metric is a line
// there and a set() where stage_runner.cpp's run_row reads it; no struct
// changes. `integer`: written as an integer (counts, bytes); `since_start`:
// every runs.csv has the column (later ones may be missing from older files).
struct CounterSpec {
  const char* name;
  bool integer;
  bool since_start;
  const char* meaning;  // for docs and errors
};
const std::vector<CounterSpec>& run_counters();

// A run's counters: name -> value; a name not set has no value (a run that
// did not complete has no times). Names are checked against run_counters():
// an unknown one throws std::logic_error (a typo in a report, not bad input).
class Counters {
 public:
  std::optional<double> get(const std::string& name) const;
  void set(const std::string& name, std::optional<double> value);
  bool operator==(const Counters&) const = default;

 private:
  std::map<std::string, double> values_;
};

// One row of runs.csv: which run it is, its resolved layout, what became of
// it, its counters, and where it ran (provenance).
struct RunRow {
  // Identity.
  std::string experiment, run_id, stage;
  int ranks = 0, threads = 0, repetition = 0;
  uint64_t seed = 0;
  // The layout (since tensor parallelism; files without it are tp 1):
  // ranks = tp x dp; block_types "" for all tp. Since pipeline parallelism:
  // "pp2 m4 zb-h1", "zero", ... ("" for none). Since the architecture
  // variants: the model keys that differ from GPT-2 ("" for none).
  int tp = 1;
  std::string block_types, pipeline, variant;
  // Since the hostile-input issue (optional): the resolved configuration's
  // digest but train.seed (runner/experiment.h); "" in older files.
  std::string config_digest;
  std::string status, reason;  // ok | failed | preempted | skipped | not run (planned, no attempt recorded), and why
  int attempts = 1;            // since the faults issue (optional): the attempts the run took (resumed, retried)
  Counters counters;
  std::optional<double> get(const std::string& counter) const { return counters.get(counter); }
  // Provenance: the run's own when it completed, else the harness's.
  std::string git_commit, git_dirty, build_type, compiler, cpu, cores, blas_core, backend, host, date;
  // Since the provenance issue (optional): the sources' hash, the Meson options and flags, and the
  // libraries' versions: "0.3.21", "MPICH 4.0.2", "runtime 13.0, driver 13.0, cuBLAS 13.1.0, NCCL 2.21.5".
  std::string source_hash, build_options, openblas, mpi, cuda;
};

struct LossRow {
  std::string experiment, run_id, stage;
  int ranks = 0, threads = 0, repetition = 0;
  int64_t epoch = 0;
  std::optional<double> loss;
  std::optional<double> val_loss;  // where the run evaluated after this step (since tensor parallelism)
};

// One job of the job loop (job_loop.h) as an index row.
struct JobRow {
  std::string label;  // what the job is: a program name, "t2", "r2-b4"
  std::string id, status, reason;
  std::optional<double> seconds;
  std::string date;
};

std::vector<std::string> runs_columns();
std::string runs_csv(const std::vector<RunRow>& rows);
// Throws std::runtime_error naming the file, the row and the column for a
// missing column, a bad number, an unknown stage or status.
std::vector<RunRow> read_runs_csv(const std::filesystem::path& path);

std::string loss_csv(const std::vector<LossRow>& rows);
std::vector<LossRow> read_loss_csv(const std::filesystem::path& path);

std::string job_index_csv(const std::string& label_column, const std::vector<JobRow>& rows);
std::vector<JobRow> read_job_index(const std::filesystem::path& path, const std::string& label_column);

// Cell text <-> numbers, shared with the reports' readers of other CSV files
// (the paper's tables). A double is written as the shortest text that reads
// back to it, as the metrics stream writes it; reading accepts any finite
// number and "" as no value. Errors name the file, the row and the column.
std::string number_cell(std::optional<double> x);
std::optional<double> parse_number(const std::string& text, const std::filesystem::path& path, size_t row,
                                   const std::string& column);
int64_t parse_integer(const std::string& text, const std::filesystem::path& path, size_t row,
                      const std::string& column);

}  // namespace gpt2::harness
