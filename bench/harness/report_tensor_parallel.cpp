// Tensor parallelism's block types side by side (report.h): per layout the
// step time, the communication each step counted beside the formula
// (comm_formula.h, worked out by the runner from the model's shape), and the
// validation loss against the standard model, paired seed by seed; loss
// curves of training and validation. tensor_parallel.md, tensor_parallel.csv
// and two charts.
#include "report_inputs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "chart.h"
#include "csv.h"
#include "report_format.h"

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

}  // namespace

void write_tensor_parallel(const ReportSpec& spec, const Inputs& in, std::vector<fs::path>& written) {
  // The standard model: the first completed tp-1 configuration in report
  // order (fewest ranks, then threads) that evaluated, else the first
  // completed one; the reference of the speed-up and of the paired losses.
  const ConfigRuns* standard = nullptr;
  for (const ConfigRuns& c : in.configs) {
    if (c.key.tp != 1 || c.ok.empty()) continue;
    if (!standard) standard = &c;
    if (stats_of(c.ok, "val_loss")) {
      if (!stats_of(standard->ok, "val_loss")) standard = &c;
      break;
    }
  }
  const auto standard_ms = standard ? median_of(standard->ok, "step_ms") : std::nullopt;
  std::map<uint64_t, double> standard_val;  // by seed
  if (standard) {
    for (const Run* r : standard->ok) {
      const auto v = r->get("val_loss");
      if (v && !standard_val.count(r->seed)) standard_val[r->seed] = *v;
    }
  }

  std::string csv = csv_row({"stage", "ranks", "threads", "tp", "dp", "block_types", "runs_ok", "runs_total",
                             "step_ms_median", "step_ms_min", "step_ms_max", "speedup", "tp_calls", "formula_tp_calls",
                             "tp_bytes", "formula_tp_bytes", "dp_calls", "formula_dp_calls", "dp_bytes",
                             "formula_dp_bytes", "comm_equals_formula", "val_loss_median", "val_loss_min",
                             "val_loss_max", "val_diff_median", "val_diff_min", "val_diff_max", "seeds_paired"});
  std::vector<std::vector<std::string>> time_rows, loss_rows;
  std::vector<std::string> not_run, mismatched;
  std::vector<Series> train_series, val_series;
  const LossData loss = load_loss(spec.results_dir / "loss.csv", in.runs);
  bool any_formula = false;
  // In the order the experiment lists them (runs.csv's), not by key: the
  // layouts read as the experiment file sets them out.
  std::vector<const ConfigRuns*> configs;
  for (const ConfigRuns& c : in.configs) configs.push_back(&c);
  std::stable_sort(configs.begin(), configs.end(),
                   [](const ConfigRuns* a, const ConfigRuns* b) { return a->all.front() < b->all.front(); });
  for (const ConfigRuns* cp : configs) {
    const ConfigRuns& c = *cp;
    if (c.ok.empty()) {
      not_run.push_back(fmt::format("{} ({})", label(c.key), status_text(c)));
      continue;
    }
    const auto ms = stats_of(c.ok, "step_ms");
    const auto val = stats_of(c.ok, "val_loss");
    std::optional<double> speedup;
    if (standard_ms && ms && ms->median > 0) speedup = *standard_ms / ms->median;
    std::vector<double> diffs;
    for (const Run* r : c.ok) {
      const auto it = standard_val.find(r->seed);
      const auto v = r->get("val_loss");
      if (v && it != standard_val.end()) diffs.push_back(*v - it->second);
    }
    const auto diff = summarize(diffs);

    const CountCell tc = count_of(c, "tp_calls"), tb = count_of(c, "tp_bytes"), dc = count_of(c, "dp_calls"),
                    db = count_of(c, "dp_bytes");
    const CountCell ftc = count_of(c, "formula_tp_calls"), ftb = count_of(c, "formula_tp_bytes"),
                    fdc = count_of(c, "formula_dp_calls"), fdb = count_of(c, "formula_dp_bytes");
    std::string equal;  // "true", "false", or "" where there is no formula
    if (ftc.value && ftb.value) {
      any_formula = true;
      bool same = tc.value == ftc.value && tb.value == ftb.value;
      if (fdc.value) same = same && dc.value == fdc.value;
      if (fdb.value) same = same && db.value == fdb.value;
      equal = same ? "true" : "false";
      if (!same) mismatched.push_back(label(c.key));
    }
    const std::string types = c.key.tp > 1 ? block_types_text(c.key) : "standard";
    time_rows.push_back({label(c.key), layout_text(c.key), types, fmt::format("{}/{}", c.ok.size(), c.all.size()),
                         ms_range(ms), speedup ? fmt::format("{:.2f}x", *speedup) : "", pair_text(tc, ftc, false),
                         pair_text(tb, ftb, true), pair_text(dc, fdc, false), pair_text(db, fdb, true)});
    loss_rows.push_back({label(c.key), types, std::to_string(val ? val->n : 0), loss_range(val),
                         &c == standard ? "(reference)" : signed_range(diff),
                         loss_range(stats_of(c.ok, "final_loss"))});
    auto cell = [](const CountCell& x) { return x.value ? std::to_string(*x.value) : std::string(); };
    csv += csv_row({c.key.stage, std::to_string(c.key.ranks), std::to_string(c.key.threads), std::to_string(c.key.tp),
                    std::to_string(c.key.ranks / c.key.tp), c.key.tp > 1 ? block_types_text(c.key) : "",
                    std::to_string(c.ok.size()), std::to_string(c.all.size()), exact(ms ? std::optional(ms->median) : std::nullopt),
                    exact(ms ? std::optional(ms->min) : std::nullopt), exact(ms ? std::optional(ms->max) : std::nullopt),
                    exact(speedup), cell(tc), cell(ftc), cell(tb), cell(ftb), cell(dc), cell(fdc), cell(db), cell(fdb),
                    equal, exact(val ? std::optional(val->median) : std::nullopt),
                    exact(val ? std::optional(val->min) : std::nullopt),
                    exact(val ? std::optional(val->max) : std::nullopt),
                    exact(diff ? std::optional(diff->median) : std::nullopt),
                    exact(diff ? std::optional(diff->min) : std::nullopt),
                    exact(diff ? std::optional(diff->max) : std::nullopt), std::to_string(diffs.size())});

    const std::string title = c.key.tp > 1 ? fmt::format("tp{} {}", c.key.tp, types) : label(c.key);
    auto curve = [&](const std::map<ConfigKey, Curve>& from, std::vector<Series>& to) {
      const auto it = from.find(c.key);
      if (it == from.end() || it->second.empty()) return;
      Series s{title, {}, false};
      for (const auto& [epoch, l] : it->second) s.points[epoch] = l;
      to.push_back(std::move(s));
    };
    curve(loss.median, train_series);
    curve(loss.val_median, val_series);
  }

  std::string md = preamble(spec, in.runs, "tensor parallelism's block types");
  if (time_rows.empty()) {
    md += fmt::format("Nothing to compare: {}.\n\n", kNoRuns);
  } else {
    md += "## Step time and communication per step\n\n";
    md += md_table({"Configuration", "Layout", "Block types", "Runs ok", "Step ms, median [min–max]",
                    standard ? fmt::format("Speed-up vs {}", label(standard->key)) : "Speed-up", "tp calls (formula)",
                    "tp MB (formula)", "dp calls (formula)", "dp MB (formula)"},
                   time_rows, "lllrrrrrrr");
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
    md += "## Validation loss against the standard model\n\n";
    md += md_table({"Configuration", "Block types", "Seeds", "Validation loss, median [min–max]",
                    standard ? fmt::format("Paired difference vs {}", label(standard->key)) : "Paired difference",
                    "Final training loss, median [min–max]"},
                   loss_rows, "llrrrr");
    md +=
        "\nValidation loss: the last evaluation of each run, on the held-out part of the corpus. Paired "
        "difference: this configuration's validation loss minus the standard model's with the same seed (the "
        "same initial weights and data), median and range over the seeds. tp-1 configurations and all-tp layouts "
        "compute the standard model's function, so theirs differ only by float rounding; spd and parallel blocks "
        "compute other functions.\n\n";
  }
  md += joined("Not in the tables (no completed runs): ", not_run);
  auto chart = [&](const std::string& name, const std::string& title, const std::vector<Series>& series,
                   const std::string& ylabel, const std::string& style) {
    if (series.empty()) {
      md += fmt::format("(plot {} not drawn: no {} in loss.csv)\n\n", name, ylabel);
      return;
    }
    const std::string body = fmt::format("set title {}\nset xlabel \"step\"\nset ylabel {}\nset key top right\n",
                                         gnuplot_string(title), gnuplot_string(ylabel)) +
                             line_chart_plot(name, series, style);
    md += draw_chart(spec.reports_dir, name, title, line_chart_data("step", series), body, written) + "\n";
  };
  chart("tensor_parallel_loss", "Training loss (median over seeds)", train_series, "training loss", "lines");
  chart("tensor_parallel_val", "Validation loss (median over seeds)", val_series, "validation loss", "linespoints");
  write_report(spec.reports_dir / "tensor_parallel.csv", csv, written);
  write_report(spec.reports_dir / "tensor_parallel.md", md, written);
}

}  // namespace gpt2::harness
