// runs.csv, loss.csv and the job indexes: each row struct's column list,
// written and read by the same code (see tables.h).
#include "tables.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "csv.h"
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

const std::vector<Column<RunRow>>& runs_schema() {
  static const std::vector<Column<RunRow>> columns = {
      col("experiment", &RunRow::experiment), col("run_id", &RunRow::run_id),
      col("stage", &RunRow::stage),           col("ranks", &RunRow::ranks),
      col("threads", &RunRow::threads),       col("repetition", &RunRow::repetition),
      col("tp", &RunRow::tp, true),           col("block_types", &RunRow::block_types, true),
      col("pipeline", &RunRow::pipeline, true),
      col("variant", &RunRow::variant, true),
      col("seed", &RunRow::seed),             col("status", &RunRow::status),
      col("reason", &RunRow::reason),         col("training_s", &RunRow::training_s),
      col("inference_s", &RunRow::inference_s), col("tokens_per_s", &RunRow::tokens_per_s),
      col("final_loss", &RunRow::final_loss), col("steps", &RunRow::steps),
      col("comm_s", &RunRow::comm_s),         col("peak_rss_mb", &RunRow::peak_rss_mb),
      // Since tensor parallelism: optional, older files lack them.
      col("step_ms", &RunRow::step_ms, true), col("val_loss", &RunRow::val_loss, true),
      col("mfu", &RunRow::mfu, true), col("params", &RunRow::params, true),
      col("activation_bytes", &RunRow::activation_bytes, true),
      col("tp_calls", &RunRow::tp_calls, true), col("tp_bytes", &RunRow::tp_bytes, true),
      col("dp_calls", &RunRow::dp_calls, true), col("dp_bytes", &RunRow::dp_bytes, true),
      col("formula_tp_calls", &RunRow::formula_tp_calls, true),
      col("formula_tp_bytes", &RunRow::formula_tp_bytes, true),
      col("formula_dp_calls", &RunRow::formula_dp_calls, true),
      col("formula_dp_bytes", &RunRow::formula_dp_bytes, true),
      col("git_commit", &RunRow::git_commit), col("git_dirty", &RunRow::git_dirty),
      col("build_type", &RunRow::build_type), col("compiler", &RunRow::compiler),
      col("cpu", &RunRow::cpu),               col("cores", &RunRow::cores),
      col("blas_core", &RunRow::blas_core),
      col("backend", &RunRow::backend, true),  // since the CUDA stages
      col("host", &RunRow::host),             col("date", &RunRow::date),
      col("source_hash", &RunRow::source_hash, true), col("build_options", &RunRow::build_options, true),
      col("openblas", &RunRow::openblas, true), col("mpi", &RunRow::mpi, true), col("cuda", &RunRow::cuda, true)};
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
    if (r.status != "ok" && r.status != "failed" && r.status != "skipped" && r.status != "not run") {
      throw std::runtime_error(fmt::format("{}: row {}: status '{}' is not one of ok, failed, skipped, not run",
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
