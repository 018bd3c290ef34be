// Reports of the experiment harness (see report.h): reads runs.csv and
// loss.csv, summarises the repetitions of each configuration (stage, ranks,
// threads) by median and min-max over the completed runs, and writes Markdown
// and CSV tables beside the paper's figures, plus gnuplot charts. It does not
// decide what was run or how; it only reads what the runner recorded.
#include "report.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>

#include "chart.h"
#include "csv.h"
#include "util/files.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStages[] = {"serial", "mpi", "cuda", "mpi_cuda"};
constexpr const char* kKinds[] = {"table1", "table2", "scaling"};
constexpr const char* kNoRuns = "no completed runs";

int stage_index(const std::string& stage) {
  const auto* it = std::find(std::begin(kStages), std::end(kStages), stage);
  return it == std::end(kStages) ? -1 : static_cast<int>(it - std::begin(kStages));
}

// ---------------------------------------------------------------- inputs

struct Run {
  std::string run_id, stage, status, reason;
  int ranks = 0, threads = 0, repetition = 0;
  std::optional<double> training_s, inference_s, tokens_per_s, final_loss, comm_s;
  std::string git_commit, git_dirty_text, build_type, compiler, cpu, cores, blas_core, backend, host, date;
  bool git_dirty = false;
  bool ok() const { return status == "ok"; }
};

// Empty text is "no value"; anything else must be a whole finite number.
std::optional<double> parse_number(const std::string& text, const fs::path& path, size_t row, const std::string& key) {
  if (text.empty()) return std::nullopt;
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) {
    throw std::runtime_error(fmt::format("{}: row {}: {} '{}' is not a finite number", path.string(), row, key, text));
  }
  return v;
}

int parse_int(const std::string& text, const fs::path& path, size_t row, const std::string& key) {
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw std::runtime_error(fmt::format("{}: row {}: {} '{}' is not an integer", path.string(), row, key, text));
  }
  return v;
}

// Columns are found by name, so their order (and extra columns) do not matter.
std::vector<Run> load_runs(const fs::path& path) {
  const std::pair<const char*, std::string Run::*> texts[] = {{"run_id", &Run::run_id},
                                                              {"stage", &Run::stage},
                                                              {"status", &Run::status},
                                                              {"reason", &Run::reason},
                                                              {"git_commit", &Run::git_commit},
                                                              {"git_dirty", &Run::git_dirty_text},
                                                              {"build_type", &Run::build_type},
                                                              {"compiler", &Run::compiler},
                                                              {"cpu", &Run::cpu},
                                                              {"cores", &Run::cores},
                                                              {"blas_core", &Run::blas_core},
                                                              {"host", &Run::host},
                                                              {"date", &Run::date}};
  const std::pair<const char*, int Run::*> ints[] = {
      {"ranks", &Run::ranks}, {"threads", &Run::threads}, {"repetition", &Run::repetition}};
  const std::pair<const char*, std::optional<double> Run::*> numbers[] = {{"training_s", &Run::training_s},
                                                                          {"inference_s", &Run::inference_s},
                                                                          {"tokens_per_s", &Run::tokens_per_s},
                                                                          {"final_loss", &Run::final_loss},
                                                                          {"comm_s", &Run::comm_s}};
  const CsvTable t = read_csv(path);
  auto indices = [&](const auto& fields) {
    std::vector<size_t> v;
    for (const auto& [name, field] : fields) v.push_back(column(t, name, path));
    return v;
  };
  const std::vector<size_t> ti = indices(texts), ii = indices(ints), ni = indices(numbers);
  // Optional: results written before the CUDA stages existed have no backend.
  const auto backend_col = std::find(t[0].begin(), t[0].end(), "backend");
  std::vector<Run> runs;
  for (size_t k = 1; k < t.size(); ++k) {
    Run r;
    if (backend_col != t[0].end()) r.backend = t[k][static_cast<size_t>(backend_col - t[0].begin())];
    for (size_t j = 0; j < ti.size(); ++j) r.*texts[j].second = t[k][ti[j]];
    for (size_t j = 0; j < ii.size(); ++j) r.*ints[j].second = parse_int(t[k][ii[j]], path, k, ints[j].first);
    for (size_t j = 0; j < ni.size(); ++j) {
      r.*numbers[j].second = parse_number(t[k][ni[j]], path, k, numbers[j].first);
    }
    if (stage_index(r.stage) < 0) {
      throw std::runtime_error(
          fmt::format("{}: row {}: stage '{}' is not one of serial, mpi, cuda, mpi_cuda", path.string(), k, r.stage));
    }
    if (r.status != "ok" && r.status != "failed" && r.status != "skipped") {
      throw std::runtime_error(
          fmt::format("{}: row {}: status '{}' is not one of ok, failed, skipped", path.string(), k, r.status));
    }
    // `git describe --dirty` already ends in "-dirty"; keep the flag, not the suffix.
    r.git_dirty = r.git_dirty_text == "true" || r.git_dirty_text == "1" || r.git_dirty_text == "yes";
    if (r.git_commit.size() > 6 && r.git_commit.ends_with("-dirty")) {
      r.git_commit.resize(r.git_commit.size() - 6);
      r.git_dirty = true;
    }
    runs.push_back(std::move(r));
  }
  return runs;
}

struct ConfigKey {
  std::string stage;
  int ranks = 0, threads = 0;
  bool operator<(const ConfigKey& o) const {
    return std::tuple(stage_index(stage), ranks, threads) < std::tuple(stage_index(o.stage), o.ranks, o.threads);
  }
  bool operator==(const ConfigKey& o) const = default;
};

ConfigKey key_of(const Run& r) { return {r.stage, r.ranks, r.threads}; }
std::string label(const ConfigKey& k) { return fmt::format("{} r{} t{}", k.stage, k.ranks, k.threads); }
std::string column_id(const ConfigKey& k) { return fmt::format("{}_r{}_t{}", k.stage, k.ranks, k.threads); }

struct ConfigRuns {
  ConfigKey key;
  std::vector<const Run*> all, ok;
};

// In report order: stage serial, mpi, cuda, mpi_cuda, then ranks, threads.
std::vector<ConfigRuns> group_by_config(const std::vector<Run>& runs) {
  std::map<ConfigKey, ConfigRuns> by_key;
  for (const Run& r : runs) {
    ConfigRuns& c = by_key[key_of(r)];
    c.key = key_of(r);
    c.all.push_back(&r);
    if (r.ok()) c.ok.push_back(&r);
  }
  std::vector<ConfigRuns> out;
  for (auto& [key, c] : by_key) out.push_back(std::move(c));
  return out;
}

using Curve = std::map<int, double>;  // epoch -> loss

struct Stats {
  size_t n = 0;
  double median = 0, min = 0, max = 0;
};

std::optional<Stats> stats(std::vector<double> v) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return Stats{n, median, v.front(), v.back()};
}

std::optional<Stats> stats_of(const std::vector<const Run*>& runs, std::optional<double> Run::*field) {
  std::vector<double> v;
  for (const Run* r : runs) {
    if (r->*field) v.push_back(*(r->*field));
  }
  return stats(v);
}

std::optional<double> median_of(const std::vector<const Run*>& runs, std::optional<double> Run::*field) {
  auto s = stats_of(runs, field);
  return s ? std::optional<double>(s->median) : std::nullopt;
}

// Median loss per epoch over the completed repetitions of each configuration.
// Rows of runs that are not ok in runs.csv (or absent from it) are ignored.
struct LossData {
  bool found = false;
  std::map<ConfigKey, Curve> median;
};

LossData load_loss(const fs::path& path, const std::vector<Run>& runs) {
  LossData data;
  if (!fs::exists(path)) return data;
  data.found = true;
  const CsvTable t = read_csv(path);
  const size_t c_id = column(t, "run_id", path), c_epoch = column(t, "epoch", path), c_loss = column(t, "loss", path);
  std::map<std::string, const Run*> ok_runs;
  for (const Run& r : runs) {
    if (r.ok()) ok_runs[r.run_id] = &r;
  }
  std::map<ConfigKey, std::map<int, std::map<std::string, double>>> values;  // config -> epoch -> run -> loss
  for (size_t k = 1; k < t.size(); ++k) {
    auto it = ok_runs.find(t[k][c_id]);
    if (it == ok_runs.end()) continue;
    const int epoch = parse_int(t[k][c_epoch], path, k, "epoch");
    const auto loss = parse_number(t[k][c_loss], path, k, "loss");
    if (loss) values[key_of(*it->second)][epoch][it->first] = *loss;
  }
  for (const auto& [key, epochs] : values) {
    for (const auto& [epoch, by_run] : epochs) {
      std::vector<double> v;
      for (const auto& [id, loss] : by_run) v.push_back(loss);
      data.median[key][epoch] = stats(v)->median;
    }
  }
  return data;
}

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

struct PaperTable2 {
  fs::path path;
  bool found = false;
  std::vector<std::pair<std::string, Curve>> by_stage;  // in the file's column order
};

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
      if (loss) curve[parse_int(t[k][c_epoch], p.path, k, "epoch")] = *loss;
    }
    p.by_stage.emplace_back(t[0][c], std::move(curve));
  }
  return p;
}

// ---------------------------------------------------------------- formatting

// Full precision (shortest round trip) for the CSV outputs.
std::string exact(std::optional<double> x) { return x ? fmt::format("{}", *x) : ""; }

// Three significant digits without an exponent: 1388, 9.09, 0.00123.
std::string sig3(double x) {
  if (x == 0) return "0";
  const int digits = static_cast<int>(std::floor(std::log10(std::fabs(x))));
  return fmt::format("{:.{}f}", x, std::max(0, 2 - digits));
}
std::string sig3(std::optional<double> x) { return x ? sig3(*x) : ""; }
// Two decimals from 0.1 s up; below, enough decimals for three significant digits.
int seconds_decimals(double x) {
  return std::fabs(x) >= 0.1 || x == 0 ? 2 : 2 - static_cast<int>(std::floor(std::log10(std::fabs(x))));
}
std::string seconds(double x) { return fmt::format("{:.{}f}", x, seconds_decimals(x)); }
std::string seconds(std::optional<double> x) { return x ? seconds(*x) : ""; }
std::string rate(std::optional<double> x) {
  return !x ? "" : std::fabs(*x) >= 100 ? fmt::format("{:.0f}", *x) : sig3(*x);
}
std::string loss4(std::optional<double> x) { return x ? fmt::format("{:.4f}", *x) : ""; }
std::string percent(std::optional<double> x) { return x ? fmt::format("{:.1f}%", 100 * *x) : ""; }

// "median [min–max]", or only the median for a single repetition.
std::string median_range(const std::optional<Stats>& s) {
  if (!s) return "";
  if (s->n == 1) return seconds(s->median);
  const int d = seconds_decimals(s->median);  // one precision for all three
  return fmt::format("{:.{}f} [{:.{}f}–{:.{}f}]", s->median, d, s->min, d, s->max, d);
}

std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c == '\n' || c == '\r' ? ' ' : c);
  return out;
}

// `align` holds 'l' or 'r' per column.
std::string md_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                     const std::string& align) {
  std::string out = "|";
  for (const std::string& h : header) out += fmt::format(" {} |", md_cell(h));
  out += "\n|";
  for (size_t k = 0; k < header.size(); ++k) out += k < align.size() && align[k] == 'r' ? "---:|" : "---|";
  out += '\n';
  for (const auto& row : rows) {
    out += '|';
    for (const std::string& cell : row) out += fmt::format(" {} |", md_cell(cell));
    out += '\n';
  }
  return out;
}

// "<lead>a; b; c.\n\n", or nothing for an empty list.
std::string joined(const std::string& lead, const std::vector<std::string>& items) {
  if (items.empty()) return "";
  std::string out = lead;
  for (size_t k = 0; k < items.size(); ++k) out += (k ? "; " : "") + items[k];
  return out + ".\n\n";
}

// "ok 3/3", "ok 2/3; failed 1/3: <reason>", "skipped: <reason>".
std::string status_text(const ConfigRuns& c) {
  struct Group {
    std::string status, reason;
    size_t count = 0;
  };
  std::vector<Group> groups;  // not-ok runs by (status, reason), in first-seen order
  for (const Run* r : c.all) {
    if (r->ok()) continue;
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const Group& g) { return g.status == r->status && g.reason == r->reason; });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{r->status, r->reason, 0});
    ++it->count;
  }
  auto with_reason = [](const std::string& head, const std::string& reason) {
    return reason.empty() ? head : fmt::format("{}: {}", head, reason);
  };
  if (c.ok.empty() && groups.size() == 1) return with_reason(groups[0].status, groups[0].reason);
  std::string out = c.ok.empty() ? "" : fmt::format("ok {}/{}", c.ok.size(), c.all.size());
  for (const Group& g : groups) {
    if (!out.empty()) out += "; ";
    out += with_reason(fmt::format("{} {}/{}", g.status, g.count, c.all.size()), g.reason);
  }
  return out;
}

// One word for the CSV: ok, partial (some repetitions not ok), failed, skipped.
std::string status_word(const ConfigRuns& c) {
  if (c.ok.size() == c.all.size()) return "ok";
  if (!c.ok.empty()) return "partial";
  for (const Run* r : c.all) {
    if (r->status == "failed") return "failed";
  }
  return "skipped";
}

std::string reasons(const ConfigRuns& c) {
  std::vector<std::string> seen;
  for (const Run* r : c.all) {
    if (!r->ok() && !r->reason.empty() && std::find(seen.begin(), seen.end(), r->reason) == seen.end()) {
      seen.push_back(r->reason);
    }
  }
  std::string out;
  for (const std::string& s : seen) out += fmt::format("{}{}", out.empty() ? "" : "; ", s);
  return out;
}

// "Measured on ..." lines from the completed runs, one per machine and build.
std::string provenance_text(const std::vector<Run>& runs) {
  struct Machine {
    std::string line;
    std::string first_date, last_date;
  };
  std::vector<std::pair<std::string, Machine>> machines;
  auto or_unknown = [](const std::string& s) { return s.empty() ? std::string("?") : s; };
  for (const Run& r : runs) {
    if (!r.ok()) continue;
    const std::string id =
        fmt::format("{} ({} cores, BLAS kernel {}){}, host {}, {{dates}}, commit {}{}; {} build, {}", or_unknown(r.cpu),
                    or_unknown(r.cores), or_unknown(r.blas_core),
                    r.backend.starts_with("cuda") ? fmt::format(", backend {}", r.backend) : "",
                    or_unknown(r.host), or_unknown(r.git_commit),
                    r.git_dirty ? " (dirty)" : "", or_unknown(r.build_type), or_unknown(r.compiler));
    auto it = std::find_if(machines.begin(), machines.end(), [&](const auto& p) { return p.first == id; });
    if (it == machines.end()) {
      machines.emplace_back(id, Machine{id, r.date, r.date});
    } else {
      it->second.first_date = std::min(it->second.first_date, r.date);
      it->second.last_date = std::max(it->second.last_date, r.date);
    }
  }
  if (machines.empty()) return fmt::format("Measured on: nothing ({}).\n", kNoRuns);
  auto line = [&](const Machine& m) {
    std::string dates =
        m.first_date == m.last_date ? or_unknown(m.first_date) : fmt::format("{} to {}", m.first_date, m.last_date);
    std::string text = m.line;
    text.replace(text.find("{dates}"), 7, dates);
    return fmt::format("Measured on {}.", text);
  };
  if (machines.size() == 1) return line(machines[0].second) + "\n";
  std::string out = "Measured on several machines or builds:\n\n";
  for (const auto& [id, m] : machines) out += fmt::format("- {}\n", line(m));
  return out;
}

std::string preamble(const ReportSpec& spec, const std::vector<Run>& runs, const std::string& title) {
  std::string out = fmt::format("# {}: {}\n\n", spec.experiment, title);
  if (!spec.description.empty()) out += spec.description + "\n\n";
  out += provenance_text(runs) + "\n";
  out += fmt::format("Reproduce with:\n\n```sh\n{}\n```\n\n", spec.reproduce_command);
  return out;
}

// ---------------------------------------------------------------- output

void write_report(const fs::path& path, const std::string& text, std::vector<fs::path>& written) {
  write_file_atomically(path, text);
  written.push_back(path);
}

// A Markdown link from the reports folder to the paper's README, shown as
// "data/paper/README.md" (the last two folders) wherever the tree lies.
std::string paper_readme_link(const fs::path& paper_dir, const fs::path& reports_dir) {
  const fs::path target = paper_dir / "README.md";
  std::error_code e1, e2;
  const fs::path a = fs::weakly_canonical(fs::absolute(target), e1),
                 b = fs::weakly_canonical(fs::absolute(reports_dir), e2);
  const fs::path rel = (e1 || e2) ? fs::path() : a.lexically_relative(b);
  const fs::path shown = a.parent_path().parent_path().filename() / a.parent_path().filename() / "README.md";
  return fmt::format("[{}]({})", shown.generic_string(), rel.empty() ? target.generic_string() : rel.generic_string());
}

// ---------------------------------------------------------------- reports

struct Inputs {
  std::vector<Run> runs;
  std::vector<ConfigRuns> configs;
  bool any_ok = false;
};

void write_runs(const ReportSpec& spec, const Inputs& in, std::vector<fs::path>& written) {
  std::string md = preamble(spec, in.runs, "every run");
  if (in.runs.empty()) md += "No runs recorded.\n";
  if (!in.any_ok && !in.runs.empty()) md += fmt::format("Every run was skipped or failed: {}.\n\n", kNoRuns);
  std::vector<std::vector<std::string>> rows;
  for (const Run& r : in.runs) {
    rows.push_back({r.run_id, r.stage, std::to_string(r.ranks), std::to_string(r.threads), std::to_string(r.repetition),
                    r.status, r.reason, seconds(r.training_s), seconds(r.inference_s), rate(r.tokens_per_s),
                    loss4(r.final_loss)});
  }
  if (!rows.empty()) {
    md += md_table({"Run", "Stage", "Ranks", "Threads", "Repetition", "Status", "Reason", "Training s", "Inference s",
                    "Tokens/s", "Final loss"},
                   rows, "llrrrllrrrr");
  }
  write_report(spec.reports_dir / "runs.md", md, written);
}

void write_table1(const ReportSpec& spec, const Inputs& in, std::vector<fs::path>& written) {
  const PaperTable1 paper = load_paper_table1(spec.paper_dir);
  const ConfigRuns* serial = nullptr;
  for (const ConfigRuns& c : in.configs) {
    if (!serial && c.key.stage == "serial" && median_of(c.ok, &Run::training_s)) serial = &c;
  }
  const std::optional<double> serial_s = serial ? median_of(serial->ok, &Run::training_s) : std::nullopt;
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
    const auto train = stats_of(c.ok, &Run::training_s), inf = stats_of(c.ok, &Run::inference_s);
    const auto train_med = train ? std::optional(train->median) : std::nullopt;
    const auto inf_med = inf ? std::optional(inf->median) : std::nullopt;
    const auto tokens = median_of(c.ok, &Run::tokens_per_s), loss = median_of(c.ok, &Run::final_loss);
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
      for (double Stats::*f : {&Stats::median, &Stats::min, &Stats::max}) {
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

void write_table2(const ReportSpec& spec, const Inputs& in, std::vector<fs::path>& written) {
  const LossData ours = load_loss(spec.results_dir / "loss.csv", in.runs);
  const PaperTable2 paper = load_paper_table2(spec.paper_dir);
  // Our curves in report order, then the paper's; each is compared with the
  // first serial curve of its own source.
  struct NamedCurve {
    std::string label, column_id, stage;
    const Curve* curve;
    bool paper;
  };
  std::vector<NamedCurve> curves;
  for (const ConfigRuns& c : in.configs) {
    auto it = ours.median.find(c.key);
    if (it != ours.median.end()) curves.push_back({label(c.key), column_id(c.key), c.key.stage, &it->second, false});
  }
  const size_t n_ours = curves.size();
  for (const auto& [stage, curve] : paper.by_stage) {
    curves.push_back({fmt::format("paper {}", stage), fmt::format("paper_{}", stage), stage, &curve, true});
  }
  const NamedCurve *our_ref = nullptr, *paper_ref = nullptr;
  for (const NamedCurve& c : curves) {
    const NamedCurve*& ref = c.paper ? paper_ref : our_ref;
    if (!ref && c.stage == "serial") ref = &c;
  }

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

  std::string summary = "curve,source,reference,max_abs_deviation,at_epoch,final_epoch,final_loss\n";
  std::vector<std::vector<std::string>> dev_rows;
  std::vector<Series> series;
  for (const NamedCurve& c : curves) {
    const NamedCurve* ref = c.paper ? paper_ref : our_ref;
    const auto dev = ref ? max_deviation(*c.curve, *ref->curve) : std::nullopt;
    const auto dev_v = dev ? std::optional(dev->first) : std::nullopt;
    const std::string at_epoch = dev ? std::to_string(dev->second) : "";
    const auto final_loss = c.curve->empty() ? std::nullopt : std::optional(c.curve->rbegin()->second);
    const std::string final_epoch = c.curve->empty() ? "" : std::to_string(c.curve->rbegin()->first);
    summary += csv_row({c.label, c.paper ? "paper" : "ours", ref ? ref->label : "", exact(dev_v), at_epoch, final_epoch,
                        exact(final_loss)});
    dev_rows.push_back({c.label, ref ? ref->label : "(no serial curve)", dev ? fmt::format("{:.4f}", *dev_v) : "",
                        at_epoch, final_epoch, loss4(final_loss)});
    Series s{c.label, {}, c.paper};
    for (const auto& [e, l] : *c.curve) s.points[e] = l;
    if (!s.points.empty()) series.push_back(std::move(s));
  }

  std::string md = preamble(spec, in.runs, "training loss per epoch (paper Table 2)");
  if (!in.any_ok) {
    md += fmt::format("No loss curves of ours: {}.\n\n", kNoRuns);
  } else if (!ours.found) {
    md += fmt::format("No loss.csv in {}: no loss curves of ours.\n\n", spec.results_dir.generic_string());
  }
  if (!paper.found) md += fmt::format("Paper figures not found: {}.\n\n", paper.path.generic_string());
  if (!curves.empty()) {
    md += "Median loss over the completed repetitions of each configuration, then the paper's loss per stage.\n\n";
    md += md_table(md_header, rows, std::string(md_header.size(), 'r'));
    md +=
        "\nLargest deviation from the serial curve (ours against our serial configuration, the paper's against "
        "the paper's serial stage) over the epochs both have, and the loss at the last epoch:\n\n";
    md += md_table({"Curve", "Against", "Max |loss - serial|", "At epoch", "Last epoch", "Final loss"}, dev_rows,
                   "llrrrr");
    md += "\n";
  }
  std::vector<std::string> without;
  for (const ConfigRuns& c : in.configs) {
    if (!ours.median.count(c.key)) without.push_back(fmt::format("{} ({})", label(c.key), status_text(c)));
  }
  md += joined("No loss curve for: ", without);
  md += fmt::format("The paper's runs used other machines, data order and initialisation (see {}).\n\n",
                    paper_readme_link(spec.paper_dir, spec.reports_dir));
  if (n_ours == 0) {
    md += fmt::format("(plot not drawn: {})\n", kNoRuns);
  } else {
    const std::string body =
        "set title \"Training loss per epoch (ours solid, paper dashed)\"\n"
        "set xlabel \"epoch\"\nset ylabel \"loss\"\nset key top right\n" +
        line_chart_plot("table2_loss", series, "lines");
    md +=
        draw_chart(spec.reports_dir, "table2_loss", "Loss per epoch", line_chart_data("epoch", series), body, written);
  }
  write_report(spec.reports_dir / "table2.csv", csv, written);
  write_report(spec.reports_dir / "table2_summary.csv", summary, written);
  write_report(spec.reports_dir / "table2.md", md, written);
}

void write_scaling(const ReportSpec& spec, const Inputs& in, std::vector<fs::path>& written) {
  // Series: one per (stage, threads) of the MPI stages; rows by ranks, ascending.
  std::map<std::pair<int, int>, std::vector<const ConfigRuns*>> by_series;
  std::vector<std::string> not_run;
  for (const ConfigRuns& c : in.configs) {
    if (c.key.stage != "mpi" && c.key.stage != "mpi_cuda") continue;
    if (c.ok.empty()) {
      not_run.push_back(fmt::format("{} ({})", label(c.key), status_text(c)));
    } else {
      by_series[{stage_index(c.key.stage), c.key.threads}].push_back(&c);
    }
  }
  std::string csv = csv_row({"stage", "threads", "ranks", "runs_ok", "runs_total", "training_s_median",
                             "tokens_per_s_median", "speedup", "efficiency", "comm_share_median"});
  std::vector<std::vector<std::string>> rows;
  std::vector<Series> series;
  std::map<int, Series> ideal;  // by base rank count
  for (const auto& [id, configs] : by_series) {
    const ConfigRuns* base = nullptr;
    for (const ConfigRuns* c : configs) {
      if (!base && median_of(c->ok, &Run::training_s)) base = c;
    }
    const auto base_s = base ? median_of(base->ok, &Run::training_s) : std::nullopt;
    Series s{fmt::format("{} t{}", configs[0]->key.stage, id.second), {}, false};
    for (const ConfigRuns* c : configs) {
      const auto train = median_of(c->ok, &Run::training_s);
      const auto tokens = median_of(c->ok, &Run::tokens_per_s);
      std::vector<double> shares;
      for (const Run* r : c->ok) {
        if (r->comm_s && r->training_s && *r->training_s > 0) shares.push_back(*r->comm_s / *r->training_s);
      }
      const auto share = stats(shares);
      std::optional<double> speedup, efficiency;
      if (base_s && train && *train > 0 && base->key.ranks > 0) {
        speedup = *base_s / *train;
        efficiency = *speedup / (static_cast<double>(c->key.ranks) / base->key.ranks);
        s.points[c->key.ranks] = *speedup;
        Series& line = ideal[base->key.ranks];
        line.title = fmt::format("ideal (from {} ranks)", base->key.ranks);
        line.dashed = true;
        line.points[c->key.ranks] = static_cast<double>(c->key.ranks) / base->key.ranks;
      }
      const auto share_med = share ? std::optional(share->median) : std::nullopt;
      csv += csv_row({c->key.stage, std::to_string(c->key.threads), std::to_string(c->key.ranks),
                      std::to_string(c->ok.size()), std::to_string(c->all.size()), exact(train), exact(tokens),
                      exact(speedup), exact(efficiency), exact(share_med)});
      rows.push_back({c->key.stage, std::to_string(c->key.threads), std::to_string(c->key.ranks),
                      fmt::format("{}/{}", c->ok.size(), c->all.size()), seconds(train), rate(tokens), sig3(speedup),
                      sig3(efficiency), percent(share_med)});
    }
    if (!s.points.empty()) series.push_back(std::move(s));
  }
  for (auto& [base, line] : ideal) series.push_back(std::move(line));

  std::string md = preamble(spec, in.runs, "scaling with MPI ranks");
  if (rows.empty()) {
    md += fmt::format("Nothing to scale: {} of the mpi or mpi_cuda stages.\n\n", kNoRuns);
  } else {
    md += md_table({"Stage", "Threads", "Ranks", "Runs ok", "Training s, median", "Tokens/s, median", "Speed-up",
                    "Efficiency", "Comm share of training, median"},
                   rows, "lrrrrrrrr");
    md +=
        "\nSpeed-up: median training time at the smallest rank count of the same stage and thread count, "
        "divided by the median at this rank count. Efficiency: speed-up / (ranks / smallest ranks). Comm "
        "share: median over the completed runs of comm_s / training_s.\n\n";
  }
  md += joined("Not in the table (no completed runs): ", not_run);
  if (series.empty()) {
    md += fmt::format("(plot not drawn: {})\n", kNoRuns);
  } else {
    const std::string body =
        "set title \"Speed-up against the smallest rank count\"\n"
        "set xlabel \"ranks\"\nset ylabel \"speed-up\"\nset key top left\n"
        "set xrange [0:*]\nset yrange [0:*]\n" +
        line_chart_plot("scaling", series, "linespoints");
    md += draw_chart(spec.reports_dir, "scaling", "Speed-up vs ranks", line_chart_data("ranks", series), body, written);
  }
  write_report(spec.reports_dir / "scaling.csv", csv, written);
  write_report(spec.reports_dir / "scaling.md", md, written);
}

}  // namespace

std::vector<fs::path> write_reports(const ReportSpec& spec) {
  std::vector<std::string> kinds;
  for (const std::string& k : spec.kinds) {
    if (std::find(std::begin(kKinds), std::end(kKinds), k) == std::end(kKinds)) {
      throw std::invalid_argument(fmt::format(
          "experiment {}: unknown report kind '{}' (expected table1, table2 or scaling)", spec.experiment, k));
    }
    if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
  }
  Inputs in;
  in.runs = load_runs(spec.results_dir / "runs.csv");
  in.configs = group_by_config(in.runs);
  in.any_ok = std::any_of(in.runs.begin(), in.runs.end(), [](const Run& r) { return r.ok(); });
  std::error_code ec;
  fs::create_directories(spec.reports_dir, ec);
  if (ec) {
    throw std::runtime_error(
        fmt::format("{}: cannot create the reports folder: {}", spec.reports_dir.string(), ec.message()));
  }

  std::vector<fs::path> written;
  write_runs(spec, in, written);
  for (const std::string& k : kinds) {
    if (k == "table1") {
      write_table1(spec, in, written);
    } else if (k == "table2") {
      write_table2(spec, in, written);
    } else {
      write_scaling(spec, in, written);
    }
  }
  return written;
}

}  // namespace gpt2::harness
