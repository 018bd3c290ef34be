#include "reports/compare.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "records/csv.h"
#include "render/report_format.h"
#include "reports/report_inputs.h"
#include "runner/process.h"
#include "runner/scratch_folder.h"
#include "util/files.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

// The one list of comparable columns: a runs.csv counter, smaller is better.
struct Metric {
  std::string name;
  bool smaller_better;
};
const std::vector<Metric>& metrics() {
  static const std::vector<Metric> m = {{"training_s", true},   {"step_ms", true},    {"inference_s", true},
                                        {"tokens_per_s", false}, {"final_loss", true}, {"val_loss", true}};
  return m;
}

const Metric& metric_of(const std::string& name) {
  for (const Metric& m : metrics()) {
    if (m.name == name) return m;
  }
  std::string known;
  for (const Metric& m : metrics()) known += (known.empty() ? "" : ", ") + m.name;
  throw std::invalid_argument(fmt::format("--metric: unknown metric '{}' (expected {})", name, known));
}

// The runs.csv files the git sides are read from go to a private scratch folder (runner/scratch_folder.h).

// A side's runs.csv: a folder holding one, results/<name>, or REV:NAME from
// git (written into `scratch`, made when the first git side needs it).
struct Side {
  std::string given, where;
  Inputs in;
};

Side load_side(const std::string& given, const CompareRequest& req, std::optional<ScratchFolder>& scratch) {
  Side s{given, "", {}};
  fs::path csv;
  const size_t colon = given.find(':');
  if (fs::is_regular_file(fs::path(given) / "runs.csv")) {
    csv = fs::path(given) / "runs.csv";
  } else if (fs::is_regular_file(req.results / given / "runs.csv")) {
    csv = req.results / given / "runs.csv";
  } else if (colon != std::string::npos && colon > 0) {
    const std::string rev = given.substr(0, colon), name = given.substr(colon + 1);
    const Captured c = capture({"git", "-C", req.repo.string(), "show", fmt::format("{}:results/{}/runs.csv", rev, name)});
    if (c.status != 0) {
      throw std::invalid_argument(fmt::format("{}: no results/{}/runs.csv at {} ({})", given, name, rev,
                                              c.err.substr(0, c.err.find('\n'))));
    }
    if (!scratch) scratch.emplace("harness_compare_");
    csv = scratch->path() / fmt::format("{}.csv", given.size());
    write_file_atomically(csv, c.out);
    s.where = fmt::format("results/{}/runs.csv at {}", name, rev);
  } else {
    throw std::invalid_argument(fmt::format(
        "{}: not a results folder with runs.csv, an experiment in {}, or REV:EXPERIMENT", given, req.results.string()));
  }
  if (s.where.empty()) s.where = csv.string();
  try {
    s.in = load_inputs(csv);
  } catch (const std::runtime_error& e) {  // an unreadable or malformed runs.csv: bad input, exit 2
    throw std::invalid_argument(fmt::format("{}: {}", given, e.what()));
  }
  return s;
}

std::string p_text(const std::optional<UTest>& t) { return t ? fmt::format("{:.4f}", t->p) : ""; }

// One configuration on both sides: the values, their medians, the test.
struct Matched {
  std::vector<double> va, vb;
  std::optional<double> ma, mb, ratio;
  std::optional<UTest> t;
  std::string note;
  bool unreliable = false;
};

Matched match(const ConfigRuns& ca, const ConfigRuns& cb, const Metric& metric) {
  Matched m;
  for (const Run* r : ca.ok) {
    if (const auto v = r->get(metric.name)) m.va.push_back(*v);
  }
  for (const Run* r : cb.ok) {
    if (const auto v = r->get(metric.name)) m.vb.push_back(*v);
  }
  if (!m.va.empty()) m.ma = median(m.va);
  if (!m.vb.empty()) m.mb = median(m.vb);
  if (m.ma && m.mb && *m.ma != 0) m.ratio = *m.mb / *m.ma;
  if (m.va.size() < kUTestMinRepetitions || m.vb.size() < kUTestMinRepetitions) {
    m.note = fmt::format("no test: fewer than {} repetitions", kUTestMinRepetitions);
    return m;
  }
  m.t = mann_whitney_u(m.va, m.vb);
  if (m.va.size() < kUTestOptimalRepetitions || m.vb.size() < kUTestOptimalRepetitions) {
    m.note = fmt::format("unreliable: {}+ repetitions recommended", kUTestOptimalRepetitions);
    m.unreliable = true;
  } else if (m.t->p < 0.05) {
    m.note = (m.ratio && ((*m.ratio < 1) == metric.smaller_better)) ? "B better" : "B worse";
  } else {
    m.note = "no significant difference";
  }
  return m;
}

}  // namespace

std::string compare_results(const CompareRequest& req) {
  const Metric& metric = metric_of(req.metric);
  if (!req.out.empty()) {
    // Before any work: the folders and runs.csv files the two sides can name
    // (load_side's places; REV:NAME reads git, nothing here) are inputs.
    OutputRules rules;
    rules.option = "--out";
    rules.folder = true;
    rules.overwrite = req.overwrite;
    for (const std::string& side : {req.a, req.b}) {
      for (const fs::path& dir : {fs::path(side), req.results / side}) {
        rules.inputs.push_back(dir);
        rules.inputs.push_back(dir / "runs.csv");
      }
    }
    check_output(req.out, rules);
  }
  const bool smaller_better = metric.smaller_better;
  std::optional<ScratchFolder> scratch;
  const Side a = load_side(req.a, req, scratch), b = load_side(req.b, req, scratch);
  scratch.reset();  // both sides are in memory

  std::map<ConfigKey, const ConfigRuns*> in_b;
  for (const ConfigRuns& c : b.in.configs) in_b[c.key] = &c;
  std::vector<std::vector<std::string>> rows;
  std::string csv = csv_row({"configuration", "metric", "n_a", "n_b", "median_a", "median_b", "ratio_b_over_a",
                             "u", "p_value", "note"});
  std::vector<std::string> only_a, only_b;
  bool any_unreliable = false;
  for (const ConfigRuns& ca : a.in.configs) {
    const auto it = in_b.find(ca.key);
    if (it == in_b.end()) {
      only_a.push_back(label(ca.key));
      continue;
    }
    const Matched m = match(ca, *it->second, metric);
    in_b.erase(it);
    any_unreliable = any_unreliable || m.unreliable;
    auto num = [](std::optional<double> x) { return x ? sig3(*x) : std::string(); };
    rows.push_back({label(ca.key), std::to_string(m.va.size()), std::to_string(m.vb.size()), num(m.ma), num(m.mb),
                    m.ratio ? fmt::format("{:.3f}", *m.ratio) : "", p_text(m.t), m.note});
    csv += csv_row({label(ca.key), req.metric, std::to_string(m.va.size()), std::to_string(m.vb.size()),
                    exact(m.ma), exact(m.mb), exact(m.ratio), m.t ? exact(m.t->u) : "", m.t ? exact(m.t->p) : "",
                    m.note});
  }
  for (const auto& [k, _] : in_b) only_b.push_back(label(k));
  if (rows.empty()) {
    throw std::invalid_argument(fmt::format("{} and {} have no configuration in common", req.a, req.b));
  }
  std::string md = fmt::format("# {} against {}: {}\n\nA: {} ({})  \nB: {} ({})\n\n", req.b, req.a, req.metric, req.a,
                               a.where, req.b, b.where);
  md += md_table({"Configuration", "n A", "n B", fmt::format("{} A (median)", req.metric),
                  fmt::format("{} B (median)", req.metric), "B / A", "p (Mann-Whitney U)", "Note"},
                 rows, "lrrrrrrl");
  md += fmt::format(
      "\nMedians over each side's completed repetitions; {} is better {}. p: the two-sided Mann-Whitney U test of the "
      "repetitions (exact without ties), as google/benchmark's compare.py applies it: below {} repetitions a side "
      "has no test, below {} the result is marked unreliable.\n",
      req.metric, smaller_better ? "smaller" : "larger", kUTestMinRepetitions, kUTestOptimalRepetitions);
  if (any_unreliable) {
    md += fmt::format("\nWARNING: results unreliable: {}+ repetitions recommended.\n", kUTestOptimalRepetitions);
  }
  md += joined("\nOnly in A: ", only_a);
  md += joined("Only in B: ", only_b);
  if (!req.out.empty()) {
    fs::create_directories(req.out);
    write_file_atomically(req.out / "compare.md", md);
    write_file_atomically(req.out / "compare.csv", csv);
  }
  return md;
}

}  // namespace gpt2::harness
