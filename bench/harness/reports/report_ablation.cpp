// The architecture ablation (report.h): one configuration per model variant
// (ConfigKey::variant), in the experiment's order, the first the baseline.
// Per variant: parameters, the final validation loss's mean and spread over
// the seeds and its paired difference from the baseline, tokens/s, MFU,
// activation memory and peak resident memory; validation curves; and a
// reading that names which component helped here and by how much, judged
// against the spread of the paired differences. ablation.md, ablation.csv
// and a chart.
#include "reports/report_inputs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "render/chart.h"
#include "records/csv.h"
#include "render/report_format.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

struct MeanSd {
  size_t n = 0;
  double mean = 0, sd = 0;
};
MeanSd mean_sd(const std::vector<double>& v) {
  MeanSd m;
  m.n = v.size();
  if (v.empty()) return m;
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - m.mean) * (x - m.mean);
    m.sd = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return m;
}

std::string variant_name(const ConfigKey& k) { return k.variant.empty() ? "gpt2 (default)" : k.variant; }

// The baseline: the first variant with a completed run; its validation loss by seed, its tokens/s.
struct Baseline {
  const ConfigRuns* c = nullptr;
  std::map<uint64_t, double> val;
  std::optional<double> tps;
};

Baseline baseline_of(const std::vector<const ConfigRuns*>& configs) {
  Baseline b;
  for (const ConfigRuns* c : configs) {
    if (c->ok.empty()) continue;
    b.c = c;
    for (const Run* r : c->ok) {
      if (const auto v = r->get("val_loss")) b.val.emplace(r->seed, *v);
    }
    b.tps = median_of(c->ok, "tokens_per_s");
    break;
  }
  return b;
}

// One variant's figures: the tidy row the table, the CSV and the reading are written from.
struct VariantRow {
  const ConfigRuns* c = nullptr;
  MeanSd val, diff;
  std::optional<int64_t> params, act;
  std::optional<double> tps, mfu, rss;
};

VariantRow row_of(const ConfigRuns& c, const Baseline& base) {
  VariantRow row;
  row.c = &c;
  std::vector<double> vals, diffs;
  for (const Run* r : c.ok) {
    const auto v = r->get("val_loss");
    if (v) vals.push_back(*v);
    const auto it = base.val.find(r->seed);
    if (v && it != base.val.end()) diffs.push_back(*v - it->second);
    if (const auto p = r->get("params")) row.params = static_cast<int64_t>(*p);
    if (const auto a = r->get("activation_bytes")) row.act = static_cast<int64_t>(*a);
  }
  row.val = mean_sd(vals);
  row.diff = mean_sd(diffs);
  row.tps = median_of(c.ok, "tokens_per_s");
  row.mfu = median_of(c.ok, "mfu");
  row.rss = median_of(c.ok, "peak_rss_mb");
  return row;
}

std::string ablation_csv(const std::vector<VariantRow>& rows) {
  std::string csv = csv_row({"variant", "stage", "ranks", "threads", "runs_ok", "runs_total", "params",
                             "val_loss_mean", "val_loss_sd", "val_diff_mean", "val_diff_sd", "seeds_paired",
                             "tokens_per_s_median", "mfu_median", "activation_mb", "peak_rss_mb_median"});
  for (const VariantRow& r : rows) {
    const ConfigKey& k = r.c->key;
    const MeanSd &v = r.val, &d = r.diff;
    csv += csv_row({k.variant, k.stage, std::to_string(k.ranks), std::to_string(k.threads),
                    std::to_string(r.c->ok.size()), std::to_string(r.c->all.size()),
                    r.params ? std::to_string(*r.params) : "", v.n ? exact(v.mean) : "", v.n > 1 ? exact(v.sd) : "",
                    d.n ? exact(d.mean) : "", d.n > 1 ? exact(d.sd) : "", std::to_string(d.n), exact(r.tps),
                    exact(r.mfu), r.act ? exact(static_cast<double>(*r.act) / 1e6) : "", exact(r.rss)});
  }
  return csv;
}

// A variant's line of the reading: a difference counts when it exceeds twice its standard error over the seeds.
std::string reading_of(const VariantRow& r, const Baseline& base) {
  const MeanSd& d = r.diff;
  const double se = d.n > 1 ? d.sd / std::sqrt(static_cast<double>(d.n)) : 0.0;
  const bool clear = d.n > 1 && std::fabs(d.mean) > 2 * se;
  return fmt::format(
      "- {}: {} the validation loss by {:.4f} on average over {} paired seeds ({}){}.", variant_name(r.c->key),
      d.mean < 0 ? "lowers" : "raises", std::fabs(d.mean), d.n,
      clear ? "more than twice its standard error" : "within twice its standard error: not distinguishable here",
      r.tps && base.tps ? fmt::format("; {:.0f} tokens/s against the baseline's {:.0f}", *r.tps, *base.tps) : "");
}

std::string ablation_md(const std::vector<VariantRow>& rows, const Baseline& base) {
  std::vector<std::vector<std::string>> cells;
  std::string reading;
  for (const VariantRow& r : rows) {
    const MeanSd &v = r.val, &d = r.diff;
    const bool is_base = r.c == base.c;
    cells.push_back({variant_name(r.c->key), fmt::format("{}/{}", r.c->ok.size(), r.c->all.size()),
                     r.params ? fmt::format("{:.3f} M", static_cast<double>(*r.params) / 1e6) : "",
                     v.n ? fmt::format("{:.4f} ± {:.4f}", v.mean, v.sd) : "",
                     is_base ? "(baseline)" : d.n ? fmt::format("{:+.4f} ± {:.4f}", d.mean, d.sd) : "",
                     r.tps ? fmt::format("{:.0f}", *r.tps) : "", r.mfu ? fmt::format("{:.1f}%", *r.mfu * 100) : "",
                     r.act ? fmt::format("{:.1f}", static_cast<double>(*r.act) / 1e6) : "",
                     r.rss ? fmt::format("{:.0f}", *r.rss) : ""});
    if (!is_base && d.n > 0) reading += reading_of(r, base) + "\n";
  }
  std::string md = "## Final validation loss, speed and memory per variant\n\n";
  md += md_table({"Variant", "Runs ok", "Parameters", "Validation loss, mean ± sd",
                  base.c ? fmt::format("Paired difference vs {}", variant_name(base.c->key)) : "Paired difference",
                  "Tokens/s (median)", "MFU (median)", "Activations MB", "Peak RSS MB"},
                 cells, "lrrrrrrrr");
  md +=
      "\nValidation loss: each run's last evaluation on the held-out part of the corpus; mean and sample "
      "standard deviation over the seeds. Paired difference: the variant's loss minus the baseline's with the "
      "same seed (the same data order; the initial weights differ where the tensors do), mean ± sd. MFU counts "
      "each variant's own matrix products (core/model/flops.h) against the SGEMM peak the run measured or was "
      "given. Activations MB: one arena's bytes (model/activations.h); peak RSS: the process's resident peak.\n\n";
  md += "## Reading\n\n";
  md += reading.empty() ? "Only the baseline completed.\n" : reading;
  return md + "\n";
}

}  // namespace

void write_ablation(const ReportSpec& spec, const Inputs& in, std::vector<fs::path>& written) {
  const std::vector<const ConfigRuns*> configs = in_run_order(in);
  const Baseline base = baseline_of(configs);
  std::vector<VariantRow> rows;
  std::vector<std::string> not_run;
  std::vector<Series> val_series;
  const LossData loss = load_loss(spec.results_dir / "loss.csv", in.runs);
  for (const ConfigRuns* c : configs) {
    if (c->ok.empty()) {
      not_run.push_back(fmt::format("{} ({})", variant_name(c->key), status_text(*c)));
      continue;
    }
    rows.push_back(row_of(*c, base));
    const auto it = loss.val_median.find(c->key);
    if (it != loss.val_median.end() && !it->second.empty()) {
      Series s{variant_name(c->key), {}, false};
      for (const auto& [epoch, l] : it->second) s.points[epoch] = l;
      val_series.push_back(std::move(s));
    }
  }
  std::string md = preamble(spec, in.runs, "architecture ablation");
  md += rows.empty() ? fmt::format("Nothing to compare: {}.\n\n", kNoRuns) : ablation_md(rows, base);
  md += joined("Not in the tables (no completed runs): ", not_run);
  md += step_chart(spec.reports_dir, "ablation_val", "Validation loss (median over seeds)", val_series,
                   "validation loss", "linespoints", written);
  write_report(spec.reports_dir / "ablation.csv", ablation_csv(rows), written);
  write_report(spec.reports_dir / "ablation.md", md, written);
}

}  // namespace gpt2::harness
