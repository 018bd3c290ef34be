// Tensor parallelism's block types side by side (report.h): per layout the
// step time, the communication each step counted beside the formula
// (comm_formula.h, worked out by the runner from the model's shape), and the
// validation loss against the standard model, paired seed by seed; loss
// curves of training and validation. tensor_parallel.md, tensor_parallel.csv
// and two charts.
#include "reports/report_inputs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "render/chart.h"
#include "records/csv.h"
#include "render/report_format.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

// One count of a configuration's completed runs: the value, or none when a
// run lacks it or the runs disagree (`varies` says which).
struct CountCell {
  std::optional<int64_t> value;
  bool varies = false;
};
CountCell count_of(const ConfigRuns& c, const std::string& counter) {
  std::set<int64_t> seen;
  for (const Run* r : c.ok) {
    const std::optional<double> v = r->get(counter);
    if (!v) return {};
    seen.insert(static_cast<int64_t>(*v));
  }
  if (seen.size() == 1) return {*seen.begin(), false};
  return {std::nullopt, seen.size() > 1};
}

std::string count_text(const CountCell& c) { return c.varies ? "varies" : c.value ? std::to_string(*c.value) : ""; }
std::string mb_text(const CountCell& c) {
  return c.varies ? "varies" : c.value ? sig3(static_cast<double>(*c.value) / 1e6) : "";
}
// "measured (formula)", marked where they differ.
std::string pair_text(const CountCell& got, const CountCell& want, bool megabytes) {
  auto text = megabytes ? mb_text : count_text;
  if (!want.value) return text(got);
  const bool same = got.value && *got.value == *want.value;
  return fmt::format("{} ({}){}", text(got), text(want), same ? "" : " ≠");
}

std::string loss_range(const std::optional<Summary>& s) {
  if (!s) return "";
  if (s->n == 1) return fmt::format("{:.4f}", s->median);
  return fmt::format("{:.4f} [{:.4f}–{:.4f}]", s->median, s->min, s->max);
}
// A paired difference: "identical" when every pair was equal, small ones
// (float rounding) in scientific notation, else four decimals.
std::string signed_range(const std::optional<Summary>& s) {
  if (!s) return "";
  if (s->min == 0 && s->max == 0) return "identical";
  const bool tiny = std::max(std::fabs(s->min), std::fabs(s->max)) < 5e-4;
  auto f = [tiny](double x) { return tiny ? fmt::format("{:+.1e}", x) : fmt::format("{:+.4f}", x); };
  if (s->n == 1) return f(s->median);
  return fmt::format("{} [{} to {}]", f(s->median), f(s->min), f(s->max));
}
std::string ms_range(const std::optional<Summary>& s) {
  if (!s) return "";
  if (s->n == 1) return fmt::format("{:.1f}", s->median);
  return fmt::format("{:.1f} [{:.1f}–{:.1f}]", s->median, s->min, s->max);
}

std::string layout_text(const ConfigKey& k) {
  return k.tp > 1 ? fmt::format("tp {} x dp {}", k.tp, k.ranks / k.tp) : fmt::format("dp {}", k.ranks);
}

// The standard model: the first completed tp-1 configuration in report
// order (fewest ranks, then threads) that evaluated, else the first
// completed one; the reference of the speed-up and of the paired losses.
struct Standard {
  const ConfigRuns* c = nullptr;
  std::optional<double> ms;
  std::map<uint64_t, double> val;  // by seed
};

Standard standard_of(const Inputs& in) {
  Standard st;
  for (const ConfigRuns& c : in.configs) {
    if (c.key.tp != 1 || c.ok.empty()) continue;
    if (!st.c) st.c = &c;
    if (stats_of(c.ok, "val_loss")) {
      if (!stats_of(st.c->ok, "val_loss")) st.c = &c;
      break;
    }
  }
  if (!st.c) return st;
  st.ms = median_of(st.c->ok, "step_ms");
  for (const Run* r : st.c->ok) {
    const auto v = r->get("val_loss");
    if (v && !st.val.count(r->seed)) st.val[r->seed] = *v;
  }
  return st;
}

// One configuration's figures: the tidy row both tables and the CSV are written from.
struct LayoutRow {
  const ConfigRuns* c = nullptr;
  std::optional<Summary> ms, val, diff, final_loss;
  std::optional<double> speedup;
  size_t paired = 0;
  CountCell tc, tb, dc, db, ftc, ftb, fdc, fdb;
  std::string equal;  // "true", "false", or "" where there is no formula
  std::string types;  // "standard" at tp 1
};

LayoutRow row_of(const ConfigRuns& c, const Standard& st) {
  LayoutRow row;
  row.c = &c;
  row.ms = stats_of(c.ok, "step_ms");
  row.val = stats_of(c.ok, "val_loss");
  row.final_loss = stats_of(c.ok, "final_loss");
  if (st.ms && row.ms && row.ms->median > 0) row.speedup = *st.ms / row.ms->median;
  std::vector<double> diffs;
  for (const Run* r : c.ok) {
    const auto it = st.val.find(r->seed);
    const auto v = r->get("val_loss");
    if (v && it != st.val.end()) diffs.push_back(*v - it->second);
  }
  row.diff = summarize(diffs);
  row.paired = diffs.size();
  row.tc = count_of(c, "tp_calls"), row.tb = count_of(c, "tp_bytes");
  row.dc = count_of(c, "dp_calls"), row.db = count_of(c, "dp_bytes");
  row.ftc = count_of(c, "formula_tp_calls"), row.ftb = count_of(c, "formula_tp_bytes");
  row.fdc = count_of(c, "formula_dp_calls"), row.fdb = count_of(c, "formula_dp_bytes");
  if (row.ftc.value && row.ftb.value) {
    bool same = row.tc.value == row.ftc.value && row.tb.value == row.ftb.value;
    if (row.fdc.value) same = same && row.dc.value == row.fdc.value;
    if (row.fdb.value) same = same && row.db.value == row.fdb.value;
    row.equal = same ? "true" : "false";
  }
  row.types = c.key.tp > 1 ? block_types_text(c.key) : "standard";
  return row;
}

std::optional<double> median_opt(const std::optional<Summary>& s) { return s ? std::optional(s->median) : std::nullopt; }
std::optional<double> min_opt(const std::optional<Summary>& s) { return s ? std::optional(s->min) : std::nullopt; }
std::optional<double> max_opt(const std::optional<Summary>& s) { return s ? std::optional(s->max) : std::nullopt; }

std::string layouts_csv(const std::vector<LayoutRow>& rows) {
  std::string csv = csv_row({"stage", "ranks", "threads", "tp", "dp", "block_types", "runs_ok", "runs_total",
                             "step_ms_median", "step_ms_min", "step_ms_max", "speedup", "tp_calls", "formula_tp_calls",
                             "tp_bytes", "formula_tp_bytes", "dp_calls", "formula_dp_calls", "dp_bytes",
                             "formula_dp_bytes", "comm_equals_formula", "val_loss_median", "val_loss_min",
                             "val_loss_max", "val_diff_median", "val_diff_min", "val_diff_max", "seeds_paired"});
  auto cell = [](const CountCell& x) { return x.value ? std::to_string(*x.value) : std::string(); };
  for (const LayoutRow& r : rows) {
    const ConfigKey& k = r.c->key;
    csv += csv_row({k.stage, std::to_string(k.ranks), std::to_string(k.threads), std::to_string(k.tp),
                    std::to_string(k.ranks / k.tp), k.tp > 1 ? block_types_text(k) : "", std::to_string(r.c->ok.size()),
                    std::to_string(r.c->all.size()), exact(median_opt(r.ms)), exact(min_opt(r.ms)), exact(max_opt(r.ms)),
                    exact(r.speedup), cell(r.tc), cell(r.ftc), cell(r.tb), cell(r.ftb), cell(r.dc), cell(r.fdc),
                    cell(r.db), cell(r.fdb), r.equal, exact(median_opt(r.val)), exact(min_opt(r.val)),
                    exact(max_opt(r.val)), exact(median_opt(r.diff)), exact(min_opt(r.diff)), exact(max_opt(r.diff)),
                    std::to_string(r.paired)});
  }
  return csv;
}

// The step-time and communication table with its notes.
std::string time_md(const std::vector<LayoutRow>& rows, const Standard& st) {
  std::vector<std::vector<std::string>> cells;
  bool any_formula = false;
  std::vector<std::string> mismatched;
  for (const LayoutRow& r : rows) {
    any_formula = any_formula || !r.equal.empty();
    if (r.equal == "false") mismatched.push_back(label(r.c->key));
    cells.push_back({label(r.c->key), layout_text(r.c->key), r.types, fmt::format("{}/{}", r.c->ok.size(), r.c->all.size()),
                     ms_range(r.ms), r.speedup ? fmt::format("{:.2f}x", *r.speedup) : "", pair_text(r.tc, r.ftc, false),
                     pair_text(r.tb, r.ftb, true), pair_text(r.dc, r.fdc, false), pair_text(r.db, r.fdb, true)});
  }
  std::string md = "## Step time and communication per step\n\n";
  md += md_table({"Configuration", "Layout", "Block types", "Runs ok", "Step ms, median [min–max]",
                  st.c ? fmt::format("Speed-up vs {}", label(st.c->key)) : "Speed-up", "tp calls (formula)",
                  "tp MB (formula)", "dp calls (formula)", "dp MB (formula)"},
                 cells, "lllrrrrrrr");
  md +=
      "\nStep ms: each run's median step time over its steps after the first, then the median and range over "
      "the runs (seeds). Calls and bytes are rank 0's collective calls of one step and their buffers' sizes "
      "(MB = 10^6 bytes), by group: the tensor-parallel group's (activations, their gradients, the shards' "
      "gradient norm) and the data-parallel group's (the gradient sum, the loss). The formula in brackets is "
      "worked out from the model's shape alone (docs/tensor_parallel.md, \"Communication\"); ≠ marks a count "
      "that differs from it.\n\n";
  if (!any_formula) {
    md += "No run recorded the formula (runs from a harness older than the tensor-parallel report).\n\n";
  } else if (mismatched.empty()) {
    md += "Every counted call and byte equals the formula.\n\n";
  } else {
    md += joined("Counts that differ from the formula: ", mismatched);
  }
  return md;
}

// The validation-loss table with its notes.
std::string loss_md(const std::vector<LayoutRow>& rows, const Standard& st) {
  std::vector<std::vector<std::string>> cells;
  for (const LayoutRow& r : rows) {
    cells.push_back({label(r.c->key), r.types, std::to_string(r.val ? r.val->n : 0), loss_range(r.val),
                     r.c == st.c ? "(reference)" : signed_range(r.diff), loss_range(r.final_loss)});
  }
  std::string md = "## Validation loss against the standard model\n\n";
  md += md_table({"Configuration", "Block types", "Seeds", "Validation loss, median [min–max]",
                  st.c ? fmt::format("Paired difference vs {}", label(st.c->key)) : "Paired difference",
                  "Final training loss, median [min–max]"},
                 cells, "llrrrr");
  md +=
      "\nValidation loss: the last evaluation of each run, on the held-out part of the corpus. Paired "
      "difference: this configuration's validation loss minus the standard model's with the same seed (the "
      "same initial weights and data), median and range over the seeds. tp-1 configurations and all-tp layouts "
      "compute the standard model's function, so theirs differ only by float rounding; spd and parallel blocks "
      "compute other functions.\n\n";
  return md;
}

// The training and validation curves of each layout, and their charts.
std::string curves_md(const ReportSpec& spec, const Inputs& in, const std::vector<LayoutRow>& rows,
                      std::vector<fs::path>& written) {
  const LossData loss = load_loss(spec.results_dir / "loss.csv", in.runs);
  std::vector<Series> train_series, val_series;
  for (const LayoutRow& r : rows) {
    const ConfigKey& k = r.c->key;
    const std::string title = k.tp > 1 ? fmt::format("tp{} {}", k.tp, r.types) : label(k);
    for (auto [from, to] : {std::pair(&loss.median, &train_series), {&loss.val_median, &val_series}}) {
      const auto it = from->find(k);
      if (it == from->end() || it->second.empty()) continue;
      Series s{title, {}, false};
      for (const auto& [epoch, l] : it->second) s.points[epoch] = l;
      to->push_back(std::move(s));
    }
  }
  return step_chart(spec.reports_dir, "tensor_parallel_loss", "Training loss (median over seeds)", train_series,
                    "training loss", "lines", written) +
         step_chart(spec.reports_dir, "tensor_parallel_val", "Validation loss (median over seeds)", val_series,
                    "validation loss", "linespoints", written);
}

}  // namespace

void write_tensor_parallel(const ReportSpec& spec, const Inputs& in, std::vector<fs::path>& written) {
  const Standard st = standard_of(in);
  std::vector<LayoutRow> rows;
  std::vector<std::string> not_run;
  for (const ConfigRuns* c : in_run_order(in)) {
    if (c->ok.empty()) {
      not_run.push_back(fmt::format("{} ({})", label(c->key), status_text(*c)));
    } else {
      rows.push_back(row_of(*c, st));
    }
  }
  std::string md = preamble(spec, in.runs, "tensor parallelism's block types");
  md += rows.empty() ? fmt::format("Nothing to compare: {}.\n\n", kNoRuns) : time_md(rows, st) + loss_md(rows, st);
  md += joined("Not in the tables (no completed runs): ", not_run);
  md += curves_md(spec, in, rows, written);
  write_report(spec.reports_dir / "tensor_parallel.csv", layouts_csv(rows), written);
  write_report(spec.reports_dir / "tensor_parallel.md", md, written);
}

}  // namespace gpt2::harness
