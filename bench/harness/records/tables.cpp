// runs.csv, loss.csv and the job indexes: each row struct's column list,
// written and read by the same code (see tables.h).
#include "records/tables.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "records/csv.h"
#include "util/json.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

std::string number_cell(std::optional<double> x) {
  // nlohmann's shortest round trip: the text the metrics stream carries.
  return x ? json_text(Json(*x)) : "";
}

std::optional<double> parse_number(const std::string& text, const fs::path& path, size_t row,
                                   const std::string& column) {
  if (text.empty()) return std::nullopt;
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) {
    throw std::runtime_error(
        fmt::format("{}: row {}: {} '{}' is not a finite number", path.string(), row, column, text));
  }
  return v;
}

int64_t parse_integer(const std::string& text, const fs::path& path, size_t row, const std::string& column) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw std::runtime_error(fmt::format("{}: row {}: {} '{}' is not an integer", path.string(), row, column, text));
  }
  return v;
}

const std::vector<CounterSpec>& run_counters() {
  // From the run's summary record, then (since tensor parallelism) from its step and eval records:
  // medians over the steps after the first; the communication of a step (the median over the steps
  // of rank 0's counts); the same four from rank 0's plan (plan.json).
  static const std::vector<CounterSpec> counters = {
      {"training_s", false, true, "the sum of the step times, seconds"},
      {"inference_s", false, true, "the final generation, seconds"},
      {"tokens_per_s", false, true, "training tokens per second"},
      {"final_loss", false, true, "the last step's training loss"},
      {"steps", true, true, "train.steps"},
      {"comm_s", false, true, "communication time over the run, seconds"},
      {"peak_rss_mb", false, true, "rank 0's peak resident memory, MB"},
      {"step_ms", false, false, "the median step time after the first step, ms"},
      {"val_loss", false, false, "the last validation loss"},
      {"mfu", false, false, "the median model FLOPs utilisation after the first step"},
      {"params", true, false, "rank 0's parameters (its plan's; else its step records' bytes / 4)"},
      {"activation_bytes", true, false, "rank 0's activation arenas, bytes"},
      {"tp_calls", true, false, "rank 0's tensor-parallel calls per step, counted"},
      {"tp_bytes", true, false, "rank 0's tensor-parallel bytes per step, counted"},
      {"dp_calls", true, false, "rank 0's data-parallel calls per step, counted"},
      {"dp_bytes", true, false, "rank 0's data-parallel bytes per step, counted"},
      {"formula_tp_calls", true, false, "tp_calls as the plan states it"},
      {"formula_tp_bytes", true, false, "tp_bytes as the plan states it"},
      {"formula_dp_calls", true, false, "dp_calls as the plan states it"},
      {"formula_dp_bytes", true, false, "dp_bytes as the plan states it"},
      {"predicted_step_ms", false, false, "the step-time model's step (plan.json's time: harness run --machine), ms"},
      {"prediction_error", false, false, "predicted_step_ms / step_ms - 1"}};
  return counters;
}

namespace {
const CounterSpec& counter_spec(const std::string& name) {
  for (const CounterSpec& c : run_counters()) {
    if (name == c.name) return c;
  }
  throw std::logic_error(fmt::format("runs.csv has no counter '{}'", name));
}
}  // namespace

std::optional<double> Counters::get(const std::string& name) const {
  (void)counter_spec(name);
  const auto it = values_.find(name);
  return it == values_.end() ? std::nullopt : std::optional(it->second);
}

void Counters::set(const std::string& name, std::optional<double> value) {
  (void)counter_spec(name);
  if (value) {
    values_[name] = *value;
  } else {
    values_.erase(name);
  }
}

namespace {

// Where a cell is, for errors.
struct Cell {
  const fs::path& path;
  size_t row;
  const std::string& column;
};

// Row members as cell text and back, by type.
std::string to_cell(const std::string& v) { return v; }
std::string to_cell(std::optional<double> v) { return number_cell(v); }
std::string to_cell(std::optional<int64_t> v) { return v ? std::to_string(*v) : ""; }
template <typename I>
  requires std::is_integral_v<I>
std::string to_cell(I v) {
  return std::to_string(v);
}

void from_cell(const std::string& t, std::string& v, const Cell&) { v = t; }
void from_cell(const std::string& t, std::optional<double>& v, const Cell& c) {
  v = parse_number(t, c.path, c.row, c.column);
}
void from_cell(const std::string& t, std::optional<int64_t>& v, const Cell& c) {
  v = t.empty() ? std::nullopt : std::optional(parse_integer(t, c.path, c.row, c.column));
}
void from_cell(const std::string& t, uint64_t& v, const Cell& c) {
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size()) {
    throw std::runtime_error(
        fmt::format("{}: row {}: {} '{}' is not a non-negative integer", c.path.string(), c.row, c.column, t));
  }
}
template <typename I>
  requires std::is_signed_v<I>
void from_cell(const std::string& t, I& v, const Cell& c) {
  const int64_t x = parse_integer(t, c.path, c.row, c.column);
  if (x < std::numeric_limits<I>::min() || x > std::numeric_limits<I>::max()) {
    throw std::runtime_error(fmt::format("{}: row {}: {} '{}' is out of range", c.path.string(), c.row, c.column, t));
  }
  v = static_cast<I>(x);
}

template <class Row>
struct Column {
  std::string name;
  std::function<std::string(const Row&)> write;
  std::function<void(Row&, const std::string&, const Cell&)> read;
  bool optional = false;  // added after files were first written: may be missing from older ones
};

template <class Row, class M>
Column<Row> col(const std::string& name, M Row::*member, bool optional = false) {
  return Column<Row>{name, [member](const Row& r) { return to_cell(r.*member); },
                     [member](Row& r, const std::string& text, const Cell& c) { from_cell(text, r.*member, c); },
                     optional};
}

template <class Row>
std::string write_table(const std::vector<Column<Row>>& columns, const std::vector<Row>& rows) {
  std::vector<std::string> fields;
  for (const Column<Row>& c : columns) fields.push_back(c.name);
  std::string out = csv_row(fields);
  for (const Row& r : rows) {
    fields.clear();
    for (const Column<Row>& c : columns) fields.push_back(c.write(r));
    out += csv_row(fields);
  }
  return out;
}

template <class Row>
std::vector<Row> read_table(const std::vector<Column<Row>>& columns, const fs::path& path) {
  const CsvTable t = read_csv(path);
  std::vector<std::pair<const Column<Row>*, size_t>> found;
  for (const Column<Row>& c : columns) {
    const auto it = std::find(t[0].begin(), t[0].end(), c.name);
    if (it != t[0].end()) {
      found.emplace_back(&c, static_cast<size_t>(it - t[0].begin()));
    } else if (!c.optional) {
      column(t, c.name, path);  // throws, naming the file and the column
    }
  }
  std::vector<Row> rows(t.size() - 1);
  for (size_t k = 1; k < t.size(); ++k) {
    for (const auto& [c, index] : found) c->read(rows[k - 1], t[k][index], Cell{path, k, c->name});
  }
  return rows;
}

// A counter as a column: an integer or a number, absent where it has no value.
Column<RunRow> counter_column(const CounterSpec& c) {
  const std::string name = c.name;
  const bool integer = c.integer;
  return Column<RunRow>{
      name,
      [name, integer](const RunRow& r) {
        const std::optional<double> v = r.counters.get(name);
        return integer ? to_cell(v ? std::optional(static_cast<int64_t>(*v)) : std::nullopt) : to_cell(v);
      },
      [name, integer](RunRow& r, const std::string& text, const Cell& cell) {
        if (integer) {
          std::optional<int64_t> v;
          from_cell(text, v, cell);
          r.counters.set(name, v ? std::optional(static_cast<double>(*v)) : std::nullopt);
        } else {
          std::optional<double> v;
          from_cell(text, v, cell);
          r.counters.set(name, v);
        }
      },
      !c.since_start};
}

const std::vector<Column<RunRow>>& runs_schema() {
  static const std::vector<Column<RunRow>> columns = [] {
    std::vector<Column<RunRow>> fixed = {
      col("experiment", &RunRow::experiment), col("run_id", &RunRow::run_id),
      col("stage", &RunRow::stage),           col("ranks", &RunRow::ranks),
      col("threads", &RunRow::threads),       col("repetition", &RunRow::repetition),
      col("tp", &RunRow::tp, true),           col("block_types", &RunRow::block_types, true),
      col("pipeline", &RunRow::pipeline, true),
      col("variant", &RunRow::variant, true), col("config_digest", &RunRow::config_digest, true),
      col("seed", &RunRow::seed),             col("status", &RunRow::status),
      col("reason", &RunRow::reason),         col("attempts", &RunRow::attempts, true),
      // the counters (run_counters()) go here
      col("git_commit", &RunRow::git_commit), col("git_dirty", &RunRow::git_dirty),
      col("build_type", &RunRow::build_type), col("compiler", &RunRow::compiler),
      col("cpu", &RunRow::cpu),               col("cores", &RunRow::cores),
      col("blas_core", &RunRow::blas_core),
      col("backend", &RunRow::backend, true),  // since the CUDA stages
      col("host", &RunRow::host),             col("date", &RunRow::date),
      col("source_hash", &RunRow::source_hash, true), col("build_options", &RunRow::build_options, true),
      col("openblas", &RunRow::openblas, true), col("mpi", &RunRow::mpi, true), col("cuda", &RunRow::cuda, true)};
    // Identity, layout and status, then the counters, then provenance.
    const auto provenance = std::find_if(fixed.begin(), fixed.end(), [](const auto& c) { return c.name == "git_commit"; });
    std::vector<Column<RunRow>> all(fixed.begin(), provenance);
    for (const CounterSpec& c : run_counters()) all.push_back(counter_column(c));
    all.insert(all.end(), provenance, fixed.end());
    return all;
  }();
  return columns;
}

const std::vector<Column<LossRow>>& loss_schema() {
  static const std::vector<Column<LossRow>> columns = {
      col("experiment", &LossRow::experiment), col("run_id", &LossRow::run_id), col("stage", &LossRow::stage),
      col("ranks", &LossRow::ranks),           col("threads", &LossRow::threads),
      col("repetition", &LossRow::repetition), col("epoch", &LossRow::epoch), col("loss", &LossRow::loss),
      col("val_loss", &LossRow::val_loss, true)};
  return columns;
}

std::vector<Column<JobRow>> job_schema(const std::string& label_column) {
  return {col(label_column, &JobRow::label), col("id", &JobRow::id),           col("status", &JobRow::status),
          col("reason", &JobRow::reason),    col("seconds", &JobRow::seconds), col("date", &JobRow::date)};
}

}  // namespace

std::vector<std::string> runs_columns() {
  std::vector<std::string> names;
  for (const auto& c : runs_schema()) names.push_back(c.name);
  return names;
}

std::string runs_csv(const std::vector<RunRow>& rows) { return write_table(runs_schema(), rows); }

std::vector<RunRow> read_runs_csv(const fs::path& path) {
  std::vector<RunRow> rows = read_table(runs_schema(), path);
  for (size_t k = 0; k < rows.size(); ++k) {
    const RunRow& r = rows[k];
    if (std::find(kStages.begin(), kStages.end(), r.stage) == kStages.end()) {
      throw std::runtime_error(fmt::format("{}: row {}: stage '{}' is not one of serial, mpi, cuda, mpi_cuda",
                                           path.string(), k + 1, r.stage));
    }
    if (r.tp < 1 || r.ranks % r.tp != 0) {
      throw std::runtime_error(fmt::format("{}: row {}: tp {} does not divide ranks {}", path.string(), k + 1, r.tp,
                                           r.ranks));
    }
    if (r.status != "ok" && r.status != "failed" && r.status != "preempted" && r.status != "skipped" &&
        r.status != "not run") {
      throw std::runtime_error(fmt::format("{}: row {}: status '{}' is not one of ok, failed, preempted, skipped, not run",
                                           path.string(), k + 1, r.status));
    }
  }
  return rows;
}

std::string loss_csv(const std::vector<LossRow>& rows) { return write_table(loss_schema(), rows); }
std::vector<LossRow> read_loss_csv(const fs::path& path) { return read_table(loss_schema(), path); }

std::string job_index_csv(const std::string& label_column, const std::vector<JobRow>& rows) {
  return write_table(job_schema(label_column), rows);
}
std::vector<JobRow> read_job_index(const fs::path& path, const std::string& label_column) {
  return read_table(job_schema(label_column), path);
}

}  // namespace gpt2::harness
