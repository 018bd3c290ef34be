// The architecture ablation (report.h): one configuration per model variant
// (ConfigKey::variant), in the experiment's order, the first the baseline.
// Per variant: parameters, the final validation loss's mean and spread over
// the seeds and its paired difference from the baseline, tokens/s, MFU,
// activation memory and peak resident memory; validation curves; and a
// reading that names which component helped here and by how much, judged
// against the spread of the paired differences. ablation.md, ablation.csv
// and a chart.
#include "report_inputs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "chart.h"
#include "csv.h"
#include "report_format.h"

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

}  // namespace

void write_ablation(const ReportSpec& spec, const Inputs& in, std::vector<fs::path>& written) {
  std::vector<const ConfigRuns*> configs;
  for (const ConfigRuns& c : in.configs) configs.push_back(&c);
  std::stable_sort(configs.begin(), configs.end(),
                   [](const ConfigRuns* a, const ConfigRuns* b) { return a->all.front() < b->all.front(); });
  const ConfigRuns* base = nullptr;
  for (const ConfigRuns* c : configs) {
    if (!c->ok.empty()) {
      base = c;
      break;
    }
  }
  std::map<uint64_t, double> base_val;  // by seed
  if (base) {
    for (const Run* r : base->ok) {
      if (const auto v = r->get("val_loss")) base_val.emplace(r->seed, *v);
    }
  }
  const auto base_tps = base ? median_of(base->ok, "tokens_per_s") : std::nullopt;
  std::string csv = csv_row({"variant", "stage", "ranks", "threads", "runs_ok", "runs_total", "params",
                             "val_loss_mean", "val_loss_sd", "val_diff_mean", "val_diff_sd", "seeds_paired",
                             "tokens_per_s_median", "mfu_median", "activation_mb", "peak_rss_mb_median"});
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> not_run, readings;
  std::vector<Series> val_series;
  const LossData loss = load_loss(spec.results_dir / "loss.csv", in.runs);
  for (const ConfigRuns* cp : configs) {
    const ConfigRuns& c = *cp;
    if (c.ok.empty()) {
      not_run.push_back(fmt::format("{} ({})", variant_name(c.key), status_text(c)));
      continue;
    }
    std::vector<double> vals, diffs;
    std::optional<int64_t> params, act;
    for (const Run* r : c.ok) {
      const auto v = r->get("val_loss");
      if (v) vals.push_back(*v);
      const auto it = base_val.find(r->seed);
      if (v && it != base_val.end()) diffs.push_back(*v - it->second);
      if (const auto p = r->get("params")) params = static_cast<int64_t>(*p);
      if (const auto a = r->get("activation_bytes")) act = static_cast<int64_t>(*a);
    }
    const MeanSd v = mean_sd(vals), d = mean_sd(diffs);
    const auto tps = median_of(c.ok, "tokens_per_s");
    const auto mfu = median_of(c.ok, "mfu");
    const auto rss = median_of(c.ok, "peak_rss_mb");
    const bool is_base = &c == base;
    rows.push_back({variant_name(c.key), fmt::format("{}/{}", c.ok.size(), c.all.size()),
                    params ? fmt::format("{:.3f} M", static_cast<double>(*params) / 1e6) : "",
                    v.n ? fmt::format("{:.4f} ± {:.4f}", v.mean, v.sd) : "",
                    is_base ? "(baseline)" : d.n ? fmt::format("{:+.4f} ± {:.4f}", d.mean, d.sd) : "",
                    tps ? fmt::format("{:.0f}", *tps) : "", mfu ? fmt::format("{:.1f}%", *mfu * 100) : "",
                    act ? fmt::format("{:.1f}", static_cast<double>(*act) / 1e6) : "",
                    rss ? fmt::format("{:.0f}", *rss) : ""});
    csv += csv_row({c.key.variant, c.key.stage, std::to_string(c.key.ranks), std::to_string(c.key.threads),
                    std::to_string(c.ok.size()), std::to_string(c.all.size()),
                    params ? std::to_string(*params) : "", v.n ? exact(v.mean) : "", v.n > 1 ? exact(v.sd) : "",
                    d.n ? exact(d.mean) : "", d.n > 1 ? exact(d.sd) : "", std::to_string(d.n), exact(tps), exact(mfu),
                    act ? exact(static_cast<double>(*act) / 1e6) : "", exact(rss)});
    if (!is_base && d.n > 0) {
      // A difference counts when it exceeds twice its standard error over the seeds.
      const double se = d.n > 1 ? d.sd / std::sqrt(static_cast<double>(d.n)) : 0.0;
      const bool clear = d.n > 1 && std::fabs(d.mean) > 2 * se;
      readings.push_back(fmt::format(
          "- {}: {} the validation loss by {:.4f} on average over {} paired seeds ({}){}.",
          variant_name(c.key), d.mean < 0 ? "lowers" : "raises", std::fabs(d.mean), d.n,
          clear ? "more than twice its standard error" : "within twice its standard error: not distinguishable here",
          tps && base_tps ? fmt::format("; {:.0f} tokens/s against the baseline's {:.0f}", *tps, *base_tps) : ""));
    }
    const auto it = loss.val_median.find(c.key);
    if (it != loss.val_median.end() && !it->second.empty()) {
      Series s{variant_name(c.key), {}, false};
      for (const auto& [epoch, l] : it->second) s.points[epoch] = l;
      val_series.push_back(std::move(s));
    }
  }

  std::string md = preamble(spec, in.runs, "architecture ablation");
  if (rows.empty()) {
    md += fmt::format("Nothing to compare: {}.\n\n", kNoRuns);
  } else {
    md += "## Final validation loss, speed and memory per variant\n\n";
    md += md_table({"Variant", "Runs ok", "Parameters", "Validation loss, mean ± sd",
                    base ? fmt::format("Paired difference vs {}", variant_name(base->key)) : "Paired difference",
                    "Tokens/s (median)", "MFU (median)", "Activations MB", "Peak RSS MB"},
                   rows, "lrrrrrrrr");
    md +=
        "\nValidation loss: each run's last evaluation on the held-out part of the corpus; mean and sample "
        "standard deviation over the seeds. Paired difference: the variant's loss minus the baseline's with the "
        "same seed (the same data order; the initial weights differ where the tensors do), mean ± sd. MFU counts "
        "each variant's own matrix products (core/model/flops.h) against the SGEMM peak the run measured or was "
        "given. Activations MB: one arena's bytes (model/activations.h); peak RSS: the process's resident peak.\n\n";
    md += "## Reading\n\n";
    if (readings.empty()) md += "Only the baseline completed.\n";
    for (const std::string& line : readings) md += line + "\n";
    md += "\n";
  }
  md += joined("Not in the tables (no completed runs): ", not_run);
  if (val_series.empty()) {
    md += "(plot ablation_val not drawn: no validation loss in loss.csv)\n\n";
  } else {
    const std::string title = "Validation loss (median over seeds)";
    const std::string body = fmt::format("set title {}\nset xlabel \"step\"\nset ylabel {}\nset key top right\n",
                                         gnuplot_string(title), gnuplot_string("validation loss")) +
                             line_chart_plot("ablation_val", val_series, "linespoints");
    md += draw_chart(spec.reports_dir, "ablation_val", title, line_chart_data("step", val_series), body, written) +
          "\n";
  }
  write_report(spec.reports_dir / "ablation.csv", csv, written);
  write_report(spec.reports_dir / "ablation.md", md, written);
}

}  // namespace gpt2::harness
