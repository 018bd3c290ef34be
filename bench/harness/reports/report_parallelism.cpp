// The parallel layouts side by side (report.h): per configuration the step
// time, the measured pipeline bubble of each stage beside the schedule's
// theory, the pipeline's communication per step beside its formula, each
// rank's memory by kind beside the formula (ZeRO-1's moments 1/N), and the
// loss deviation from the one-rank run; one SVG timeline of a step per
// schedule. parallelism.md, parallelism.csv, parallelism_timeline_<schedule>.svg.
// Reads what the stages wrote in each run's folder (metrics.jsonl with its
// per-rank waits and arenas, the summary's memory record, timeline.jsonl)
// and the engine's plan of the run (plan.json): every "theory" and
// "formula" figure is the plan's (docs/plan.md).
#include "reports/report_inputs.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <thread>

#include "records/csv.h"
#include "render/report_format.h"
#include "records/run_plan.h"
#include "util/json.h"
#include "util/records.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

// The layout of a run, as its plan states it.
struct Layout {
  int ranks = 1, dp = 1, tp = 1, pp = 1, m = 1, zero = 0, cp = 1;
  std::string schedule;
};

Layout layout_of(const Json& plan) {
  const Json& l = plan["layout"];
  return Layout{plan["ranks"].get<int>(), l["dp"].get<int>(), l["tp"].get<int>(), l["pp"].get<int>(),
                l["microbatches"].get<int>(), l["zero"].get<int>(), l.value("cp", 1), l["schedule"].get<std::string>()};
}

struct RunFacts {
  std::vector<double> bubble;  // per world rank: median over steps (after the first) of wait / step time
  std::vector<int> arenas;     // per world rank: the most arenas in use in any step
  std::vector<int> pipeline_stage;  // per world rank
  std::optional<int64_t> pp_calls, pp_bytes;
  int64_t tp_calls = 0, tp_bytes = 0;  // rank 0's tensor-parallel group in the last step
  int64_t dp_bytes = 0;  // rank 0's data-parallel bytes in the last step
  int64_t cp_calls = 0, cp_bytes = 0;  // rank 0's context-parallel ring in the last step
  Json memory = Json::array();
  bool deterministic = false;  // train.deterministic (the summary's provenance)
};

// A run's state hash (RunSummary::state_hash), "" when it wrote none or cannot be read.
std::string state_hash_of(const fs::path& dir) {
  try {
    const MetricsStream m = read_metrics_stream(dir / "metrics.jsonl");
    return m.summary ? m.summary->state_hash : "";
  } catch (const std::exception&) {
    return "";
  }
}

std::optional<RunFacts> facts_of(const fs::path& dir) {
  try {
    const MetricsStream m = read_metrics_stream(dir / "metrics.jsonl");
    if (!m.summary || m.steps.empty()) return std::nullopt;
    RunFacts f;
    const size_t ranks = m.steps.front().stage_wait_ms.size();
    std::vector<std::vector<double>> shares(ranks);
    f.arenas.assign(ranks, 0);
    for (size_t k = 0; k < m.steps.size(); ++k) {
      const StepRecord& s = m.steps[k];
      if (s.stage_wait_ms.size() != ranks) continue;
      for (size_t r = 0; r < ranks; ++r) {
        if (k > 0 && s.step_ms > 0) shares[r].push_back(s.stage_wait_ms[r] / s.step_ms);
        if (r < s.stage_arenas.size()) f.arenas[r] = std::max(f.arenas[r], s.stage_arenas[r]);
      }
    }
    for (auto& v : shares) f.bubble.push_back(v.empty() ? 0.0 : median(std::move(v)));
    const StepRecord& last = m.steps.back();
    f.pp_calls = static_cast<int64_t>(last.pp_calls);
    f.pp_bytes = static_cast<int64_t>(last.pp_bytes);
    f.dp_bytes = static_cast<int64_t>(last.dp_bytes);
    f.tp_calls = static_cast<int64_t>(last.tp_calls);
    f.tp_bytes = static_cast<int64_t>(last.tp_bytes);
    f.cp_calls = static_cast<int64_t>(last.cp_calls);
    f.cp_bytes = static_cast<int64_t>(last.cp_bytes);
    if (m.summary->provenance.contains("memory")) f.memory = m.summary->provenance["memory"];
    for (const Json& r : f.memory) f.pipeline_stage.push_back(r.value("stage", 0));
    f.deterministic = m.summary->provenance.value("deterministic", false);
    return f;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// One configuration's first completed run, with what the tables need of it.
struct RunView {
  const ConfigRuns* c = nullptr;
  fs::path dir;
  Json plan;
  Layout lay;
  RunFacts facts;
  std::optional<Summary> ms;
  const ConfigRuns* reference = nullptr;  // the one-rank run of the same configuration (loss_reference)
  std::optional<double> dev;  // the largest relative loss deviation from the reference
  bool over = false;          // more ranks x threads than this machine's cores
  std::map<int, std::pair<double, int>> per_pipeline_stage;  // stage -> (mean bubble, most arenas)

  const Json& rank_plan(size_t r) const { return plan["per_rank"][r]; }
  int64_t planned_pp(const char* what) const { return rank_plan(0)["comm"]["pp"][what].get<int64_t>(); }
  // The schedule's arenas on stage s: the plan's, on the stage's first rank.
  int64_t planned_arenas(int s) const {
    for (const Json& r : plan["per_rank"]) {
      if (r["stage"].get<int>() == s) return r["memory"]["arenas"].get<int64_t>();
    }
    return 0;
  }
};

std::string pct(double x) { return fmt::format("{:.1f}%", 100 * x); }
std::string mb(double bytes) { return fmt::format("{:.2f}", bytes / 1e6); }

// One step's timeline (timeline.jsonl's line for `step`) as an SVG: a row per
// rank, a box per event, coloured by kind; on a rank holding several virtual
// stages (an event's fifth field), its later stages' boxes lighter.
std::string timeline_svg(const fs::path& timeline, int step, const std::string& title) {
  std::ifstream in(timeline);
  std::string line;
  Json chosen;
  while (std::getline(in, line)) {
    const Json j = Json::parse(line, nullptr, false);
    if (j.is_object() && j.value("step", -1) == step) chosen = j;
  }
  if (!chosen.is_object()) return "";
  double end = 0;
  for (const Json& r : chosen["ranks"]) {
    for (const Json& e : r["events"]) end = std::max(end, e[3].get<double>());
  }
  if (end <= 0) return "";
  const int W = 900, left = 115, row = 28, top = 40;
  const int rows = static_cast<int>(chosen["ranks"].size());
  const std::map<std::string, std::string> colour = {{"F", "#4c78a8"}, {"BW", "#54a24b"}, {"B", "#54a24b"},
                                                     {"W", "#f58518"}, {"recv", "#d0d0d0"}, {"send", "#e8e8e8"}};
  const std::map<std::string, std::string> lighter = {{"F", "#9ecae9"}, {"BW", "#88d27a"}, {"B", "#88d27a"},
                                                      {"W", "#ffbf79"}, {"recv", "#d0d0d0"}, {"send", "#e8e8e8"}};
  const auto pipeline_stage_of = [](const Json& e) { return e.size() > 4 ? e[4].get<int>() : -1; };
  bool virtual_stages = false;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"11\">\n<text x=\"{}\" y=\"18\" font-size=\"13\">{}</text>\n",
      W + left + 20, top + rows * row + 60, left, title);
  const double scale = W / end;
  int i = 0;
  for (const Json& r : chosen["ranks"]) {
    const int y = top + i * row;
    std::set<int> held;  // the virtual stages this rank's events served
    for (const Json& e : r["events"]) held.insert(pipeline_stage_of(e));
    virtual_stages = virtual_stages || held.size() > 1;
    std::string stages;
    for (int s : held) stages += (stages.empty() ? "" : ", ") + std::to_string(s);
    svg += fmt::format("<text x=\"4\" y=\"{}\">rank {} (stage {})</text>\n", y + 17, r["rank"].get<int>(),
                       held.size() > 1 ? stages : std::to_string(r["stage"].get<int>()));
    for (const Json& e : r["events"]) {
      const std::string kind = e[0].get<std::string>();
      const double x0 = e[2].get<double>() * scale, x1 = e[3].get<double>() * scale;
      const bool later = held.size() > 1 && pipeline_stage_of(e) != *held.begin();
      const std::map<std::string, std::string>& palette = later ? lighter : colour;
      const auto c = palette.find(kind);
      const std::string stage_label = held.size() > 1 ? fmt::format(" stage {}", pipeline_stage_of(e)) : "";
      svg += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\" stroke=\"white\" "
          "stroke-width=\"0.5\"><title>{} {}{} {:.3f}-{:.3f} ms</title></rect>\n",
          left + x0, y + 4, std::max(0.5, x1 - x0), row - 8, c == palette.end() ? "#999" : c->second, kind,
          e[1].get<int>(), stage_label, e[2].get<double>(), e[3].get<double>());
      if (kind != "recv" && kind != "send" && x1 - x0 > 14) {
        svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" fill=\"{}\">{}{}</text>\n", left + x0 + 2, y + 18,
                           later ? "black" : "white", kind, e[1].get<int>());
      }
    }
    ++i;
  }
  const int ly = top + rows * row + 20;
  int lx = left;
  for (const auto& [k, name] : std::vector<std::pair<std::string, std::string>>{
           {"F", "F forward"}, {"BW", "B / BW backward"}, {"W", "W weight gradients"}, {"recv", "waiting for a peer"}}) {
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}"
                       "</text>\n", lx, ly, colour.at(k), lx + 16, ly + 10, name);
    lx += 170;
  }
  if (virtual_stages) {
    svg += fmt::format("<text x=\"{}\" y=\"{}\">lighter: the rank's later virtual stage</text>\n", left, ly + 28);
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\">0 to {:.2f} ms</text>\n</svg>\n", left + W - 100, ly + 10, end);
  return svg;
}

// The largest relative gap of c's median loss curve from the reference's.
std::optional<double> loss_deviation(const LossData& loss, const ConfigRuns& c, const ConfigRuns* reference) {
  if (!reference || &c == reference) return std::nullopt;
  const auto a = loss.median.find(c.key), b = loss.median.find(reference->key);
  if (a == loss.median.end() || b == loss.median.end()) return std::nullopt;
  double worst = 0;
  for (const auto& [e, l] : a->second) {
    const auto it = b->second.find(e);
    if (it != b->second.end() && it->second != 0) worst = std::max(worst, std::fabs(l - it->second) / it->second);
  }
  return worst;
}

// Per stage: the mean over its ranks of the measured bubble, the most arenas.
void pipeline_stage_means(RunView& v) {
  std::map<int, int> pipeline_stage_ranks;
  for (size_t r = 0; r < v.facts.bubble.size() && r < v.facts.pipeline_stage.size(); ++r) {
    auto& [b, n] = v.per_pipeline_stage[v.facts.pipeline_stage[r]];
    b += v.facts.bubble[r];
    n = std::max(n, r < v.facts.arenas.size() ? v.facts.arenas[r] : 0);
    ++pipeline_stage_ranks[v.facts.pipeline_stage[r]];
  }
  for (auto& [s, bn] : v.per_pipeline_stage) bn.first /= pipeline_stage_ranks[s];
}

// The train keys that choose how a step is computed, not what: threads,
// microbatches (train.micro_batch, retired, in older results' files),
// recomputation, the summation order, the products' provider, checkpoints
// and records.
constexpr std::array<std::string_view, 15> kHowKeys = {
    "threads", "micro_batch", "recompute", "deterministic", "gemm", "gemm_choices", "grad_bucket_mb",
    "stop_within_step", "layer_grad_norms", "peak_gflops", "checkpoint_every", "save_checkpoint",
    "keep_checkpoints", "checkpoint_format", "async_checkpoint"};

// What a run's losses depend on: its resolved configuration (the run
// folder's config.yaml, as the stage wrote it) without the parallel section,
// the debug section older files hold (test hooks now) and kHowKeys; "" where
// the folder has none (older results).
std::string loss_identity(const fs::path& dir) {
  std::ifstream f(dir / "config.yaml");
  std::string out, line;
  bool parallel = false, train = false;
  while (std::getline(f, line)) {
    if (!line.empty() && line[0] != ' ') {
      parallel = line.rfind("parallel:", 0) == 0 || line.rfind("debug:", 0) == 0;
      train = line.rfind("train:", 0) == 0;
    }
    const bool how = train && std::any_of(kHowKeys.begin(), kHowKeys.end(), [&](std::string_view k) {
      return line.rfind(fmt::format("  {}:", k), 0) == 0;
    });
    if (!parallel && !how) out += line + '\n';
  }
  return out;
}

// The reference of a configuration's loss deviation: the first completed
// one-rank configuration in the experiment's order (the default's, where a
// deterministic one-rank run follows it) whose configuration is the same
// but the layout, so that an experiment over sequence lengths compares each
// length with its own one-rank run; none where no such run completed.
const ConfigRuns* loss_reference(const std::vector<const ConfigRuns*>& configs, const ConfigRuns& c,
                                 const fs::path& results_dir) {
  if (c.ok.empty()) return nullptr;
  const std::string id = loss_identity(results_dir / c.ok.front()->run_id);
  for (const ConfigRuns* r : configs) {
    if (r->key.ranks == 1 && r->key.pipeline.empty() && !r->ok.empty() &&
        loss_identity(results_dir / r->ok.front()->run_id) == id) {
      return r;
    }
  }
  return nullptr;
}

// The configurations in run order, each its first completed run's view; the
// others as "label (why)".
std::vector<RunView> views_of(const ReportSpec& spec, const Inputs& in, std::vector<std::string>& not_run) {
  const LossData loss = load_loss(spec.results_dir / "loss.csv", in.runs);
  const std::vector<const ConfigRuns*> configs = in_run_order(in);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::vector<RunView> views;
  for (const ConfigRuns* cp : configs) {
    if (cp->ok.empty()) {
      not_run.push_back(fmt::format("{} ({})", label(cp->key), status_text(*cp)));
      continue;
    }
    RunView v;
    v.c = cp;
    v.dir = spec.results_dir / cp->ok.front()->run_id;
    const std::optional<Json> plan = read_plan(v.dir);
    const std::optional<RunFacts> facts = facts_of(v.dir);
    if (!plan || !facts) {
      not_run.push_back(fmt::format("{} (its run folder lacks plan.json or metrics)", label(cp->key)));
      continue;
    }
    v.plan = *plan;
    v.lay = layout_of(v.plan);
    v.facts = *facts;
    v.ms = stats_of(cp->ok, "step_ms");
    v.reference = loss_reference(configs, *cp, spec.results_dir);
    v.dev = loss_deviation(loss, *cp, v.reference);
    v.over = static_cast<unsigned>(cp->key.ranks) * static_cast<unsigned>(cp->key.threads) > cores;
    pipeline_stage_means(v);
    views.push_back(std::move(v));
  }
  return views;
}

// The step-time table's row of a run.
std::vector<std::string> time_row(const RunView& v) {
  const Layout& l = v.lay;
  std::string bubbles, arenas;
  for (const auto& [s, bn] : v.per_pipeline_stage) {
    bubbles += fmt::format("{}{}", bubbles.empty() ? "" : " / ", pct(bn.first));
    arenas += fmt::format("{}{} ({})", arenas.empty() ? "" : " / ", bn.second, v.planned_arenas(s));
  }
  const int64_t fcalls = v.planned_pp("calls"), fbytes = v.planned_pp("bytes");
  const bool pp_ok = v.facts.pp_calls == fcalls && v.facts.pp_bytes == fbytes;
  const std::string ne = pp_ok ? "" : " ≠";
  const std::string grid = l.cp > 1 ? fmt::format("dp {} x tp {} x cp {} x pp {}", l.dp, l.tp, l.cp, l.pp)
                                     : fmt::format("dp {} x tp {} x pp {}", l.dp, l.tp, l.pp);
  return {label(v.c->key) + (v.over ? " (oversubscribed)" : ""), grid,
          l.pp > 1 || l.m > 1 ? fmt::format("{}, m {}", l.schedule, l.m) : "",
          fmt::format("{}/{}", v.c->ok.size(), v.c->all.size()), v.ms ? fmt::format("{:.1f}", v.ms->median) : "",
          bubbles, l.pp > 1 ? pct(v.plan["bubble"].get<double>()) : "", arenas,
          l.pp > 1 ? fmt::format("{} ({}){}", v.facts.pp_calls.value_or(0), fcalls, ne) : "",
          l.pp > 1 ? fmt::format("{} ({}){}", mb(static_cast<double>(v.facts.pp_bytes.value_or(0))),
                                 mb(static_cast<double>(fbytes)), ne)
                   : "",
          v.dev ? fmt::format("{:.1e}", *v.dev) : (v.c == v.reference ? "(reference)" : "")};
}

// A communication table's row: the run's `name`, its step time, rank 0's
// `group` calls and bytes in the last step and its activations (with
// `layers`, also the layers' share), each beside the plan's; ≠ marks a
// count that differs from it.
std::vector<std::string> traffic_row(const RunView& v, const std::string& name, const char* group, int64_t calls,
                                     int64_t bytes, bool layers) {
  const Json& comm = v.rank_plan(0)["comm"][group];
  const Json& planned = v.rank_plan(0)["memory"];
  const Json counted = v.facts.memory.empty() ? Json::object() : v.facts.memory[0];
  const auto pair = [](const std::string& got, const std::string& want) {
    return fmt::format("{} ({}){}", got, want, got == want ? "" : " ≠");
  };
  std::vector<std::string> row = {
      name, v.ms ? fmt::format("{:.1f}", v.ms->median) : "",
      pair(std::to_string(calls), std::to_string(comm["calls"].get<int64_t>())),
      pair(mb(static_cast<double>(bytes)), mb(comm["bytes"].get<double>())),
      pair(mb(counted.value("activations_bytes", 0.0)), mb(planned["activations_bytes"].get<double>()))};
  if (layers) {
    row.push_back(pair(mb(counted.value("arena_layers_bytes", 0.0)), mb(planned["arena_layers_bytes"].get<double>())));
  }
  return row;
}

// The tensor-parallel table's row of a run with tp > 1.
std::vector<std::string> tp_row(const RunView& v) {
  return traffic_row(v, label(v.c->key), "tp", v.facts.tp_calls, v.facts.tp_bytes, true);
}

// The context-parallel table's row of a run with cp > 1 (the ring's traffic).
std::vector<std::string> cp_row(const RunView& v) {
  return traffic_row(v, label(v.c->key) + (v.over ? " (oversubscribed)" : ""), "cp", v.facts.cp_calls,
                     v.facts.cp_bytes, false);
}

// The memory table's rows of a run (one per rank) and their CSV lines.
void memory_rows(const RunView& v, std::vector<std::vector<std::string>>& rows, std::string& csv) {
  const Layout& l = v.lay;
  for (const Json& r : v.facts.memory) {
    const size_t rank = static_cast<size_t>(r.value("rank", 0));
    const Json& planned = v.rank_plan(rank)["memory"];
    const double params = r.value("params_bytes", 0.0), moments = r.value("moments_bytes", 0.0);
    const double want_moments = planned["moments_bytes"].get<double>();
    const int s = r.value("stage", 0);
    const double state = r.value("model_state_bytes", params + r.value("grads_bytes", 0.0) + moments);
    const double formula = r.value("formula_bytes", 0.0);
    const bool grad_group = l.dp * l.cp > 1;  // the gradient group: dp x cp ranks
    const double want_dp = grad_group ? v.rank_plan(0)["comm"]["dp"]["bytes"].get<double>() : 0.0;
    rows.push_back({label(v.c->key), std::to_string(rank), std::to_string(s), std::to_string(l.zero), mb(params),
                    mb(r.value("gathered_bytes", 0.0)), mb(r.value("grads_bytes", 0.0)),
                    mb(r.value("comm_buffer_bytes", 0.0)), fmt::format("{} ({})", mb(moments), mb(want_moments)),
                    formula > 0 ? fmt::format("{} ({}, {:+.1f}%)", mb(state), mb(formula),
                                              100.0 * (state - formula) / formula)
                                : mb(state),
                    fmt::format("{} x {}", r.value("arenas", 0), mb(r.value("arena_bytes", 0.0))),
                    mb(r.value("activations_bytes", 0.0)),
                    rank == 0 && grad_group ? fmt::format("{} ({})", mb(static_cast<double>(v.facts.dp_bytes)), mb(want_dp))
                                          : ""});
    csv += csv_row({label(v.c->key), std::to_string(v.c->key.ranks), std::to_string(l.dp), std::to_string(l.tp),
                    std::to_string(l.pp), std::to_string(l.m), l.schedule, std::to_string(l.zero),
                    v.over ? "true" : "false", std::to_string(v.c->ok.size()),
                    exact(v.ms ? std::optional(v.ms->median) : std::nullopt), std::to_string(s),
                    rank < v.facts.bubble.size() ? exact(v.facts.bubble[rank]) : "", exact(v.plan["bubble"].get<double>()),
                    rank < v.facts.arenas.size() ? std::to_string(v.facts.arenas[rank]) : "",
                    std::to_string(planned["arenas"].get<int64_t>()), std::to_string(v.facts.pp_calls.value_or(0)),
                    std::to_string(v.planned_pp("calls")), std::to_string(v.facts.pp_bytes.value_or(0)),
                    std::to_string(v.planned_pp("bytes")), exact(params), exact(r.value("grads_bytes", 0.0)),
                    exact(moments), exact(want_moments), exact(r.value("activations_bytes", 0.0)), exact(v.dev)});
  }
}

// One timeline per schedule: the first two-stage configuration with 4
// microbatches (else any); the schedules drawn, in order.
std::vector<std::string> draw_timelines(const ReportSpec& spec, const std::vector<RunView>& views,
                                        std::vector<fs::path>& written) {
  std::vector<std::string> svgs;
  std::map<std::string, bool> drawn;  // schedule -> drawn with 4 microbatches
  for (const RunView& v : views) {
    const Layout& l = v.lay;
    if (l.pp == 1 || (drawn.count(l.schedule) && (drawn[l.schedule] || l.m != 4))) continue;
    const std::string svg =
        timeline_svg(v.dir / "timeline.jsonl", 1, fmt::format("{}: step 1 of {}", l.schedule, label(v.c->key)));
    if (svg.empty()) continue;
    write_report(spec.reports_dir / ("parallelism_timeline_" + l.schedule + ".svg"), svg, written);
    if (!drawn.count(l.schedule)) svgs.push_back(l.schedule);
    drawn[l.schedule] = l.m == 4;
  }
  return svgs;
}

// zb-h1 against 1f1b on two stages of one replica, per microbatch count.
std::string zb_reading(const std::vector<RunView>& views) {
  struct SchedulePoint {
    double step_ms = 0, peak_activations = 0;
    std::vector<double> bubble;
  };
  std::map<std::pair<int, std::string>, SchedulePoint> points;
  for (const RunView& v : views) {
    const Layout& l = v.lay;
    if (l.pp != 2 || l.tp != 1 || l.dp != 1 || l.cp != 1 || l.zero || !v.ms) continue;
    SchedulePoint& pt = points[{l.m, l.schedule}];
    pt.step_ms = v.ms->median;
    for (const auto& [s, bn] : v.per_pipeline_stage) pt.bubble.push_back(bn.first);
    for (const Json& r : v.facts.memory) pt.peak_activations = std::max(pt.peak_activations, r.value("activations_bytes", 0.0));
  }
  std::string reading;
  for (const auto& [key, one] : points) {
    if (key.second != "1f1b") continue;
    const auto zb = points.find({key.first, "zb-h1"});
    if (zb == points.end() || zb->second.bubble.size() != one.bubble.size() || one.bubble.empty()) continue;
    std::string ratios;
    bool half = true;
    for (size_t s = 0; s < one.bubble.size(); ++s) {
      const double r = one.bubble[s] > 0 ? zb->second.bubble[s] / one.bubble[s] : 0;
      half = half && r <= 0.5;
      ratios += fmt::format("{}{:.2f}", s ? " / " : "", r);
    }
    reading += fmt::format(
        "- m {}: zb-h1's bubble is {} of 1f1b's on stages 0 / 1 (goal: at most 0.5: {}); its step {:.1f} ms against "
        "{:.1f} ({:.2f}x); its peak activations over the ranks {} MB against {} MB ({:.2f}x).\n",
        key.first, ratios, half ? "met" : "not met", zb->second.step_ms, one.step_ms,
        one.step_ms > 0 ? zb->second.step_ms / one.step_ms : 0.0, mb(zb->second.peak_activations),
        mb(one.peak_activations), one.peak_activations > 0 ? zb->second.peak_activations / one.peak_activations : 0.0);
  }
  return reading;
}

// train.deterministic's runs: each repetition's final state hash against
// the one-rank deterministic run's (the reference), and the step time beside
// the same layout's without it (same ranks, threads and plan layout).
std::string bits_section(const ReportSpec& spec, const std::vector<RunView>& views, std::string& csv) {
  const RunView* ref = nullptr;
  for (const RunView& v : views) {
    if (v.facts.deterministic && v.lay.ranks == 1 && !ref) ref = &v;
  }
  std::vector<std::vector<std::string>> rows;
  for (const RunView& v : views) {
    if (!v.facts.deterministic) continue;
    const std::string want = ref ? state_hash_of(spec.results_dir / ref->c->ok.front()->run_id) : "";
    int equal = 0, hashed = 0;
    for (const Run* r : v.c->ok) {
      const std::string h = state_hash_of(spec.results_dir / r->run_id);
      if (h.empty()) continue;
      ++hashed;
      equal += !want.empty() && h == want;
    }
    const RunView* plain = nullptr;
    for (const RunView& w : views) {
      const Layout &a = w.lay, &b = v.lay;
      if (!w.facts.deterministic && w.c->key.ranks == v.c->key.ranks && w.c->key.threads == v.c->key.threads &&
          a.dp == b.dp && a.tp == b.tp && a.pp == b.pp && a.m == b.m && a.zero == b.zero && a.schedule == b.schedule) {
        plain = &w;
      }
    }
    const std::string cost = plain && plain->ms && v.ms && plain->ms->median > 0
                                 ? fmt::format("{:+.1f}%", 100 * (v.ms->median / plain->ms->median - 1))
                                 : "";
    const std::string bits = &v == ref     ? "(reference)"
                             : hashed == 0 ? "no checkpoint"
                                           : fmt::format("{} ({}/{} runs)", equal == hashed ? "yes" : "NO", equal,
                                                         hashed);
    const Layout& l = v.lay;
    rows.push_back({label(v.c->key) + (v.over ? " (oversubscribed)" : ""),
                    fmt::format("dp {} x tp {} x pp {}{}", l.dp, l.tp, l.pp, l.zero ? fmt::format(", ZeRO-{}", l.zero) : ""),
                    l.pp > 1 ? fmt::format("{}, m {}", l.schedule, l.m) : "", v.ms ? fmt::format("{:.1f}", v.ms->median) : "",
                    plain && plain->ms ? fmt::format("{:.1f}", plain->ms->median) : "",
                    cost, bits});
    csv += csv_row({label(v.c->key), std::to_string(v.c->key.ranks), std::to_string(l.dp), std::to_string(l.tp),
                    std::to_string(l.pp), std::to_string(l.m), l.schedule, std::to_string(l.zero),
                    exact(v.ms ? std::optional(v.ms->median) : std::nullopt),
                    exact(plain && plain->ms ? std::optional(plain->ms->median) : std::nullopt),
                    std::to_string(equal), std::to_string(hashed), &v == ref ? "true" : "false"});
  }
  if (rows.empty()) return "";
  std::string md = "## Bits equal to serial (train.deterministic)\n\n";
  md += md_table({"Configuration", "Layout", "Schedule", "Step ms (median)", "Without deterministic (ms)", "Cost",
                  "Bits equal to serial"},
                 rows, "lllrrrl");
  md +=
      "\nEach run with `train.deterministic true` against the one-rank run with it: \"yes\" when every "
      "repetition's final parameters and both Adam moments hash to the reference's (RunSummary::state_hash: "
      "FNV-1a over the checkpoint's float bytes), so the layout computed serial's bits. Cost: the median step "
      "against the same layout's (ranks, threads, dp, tp, pp, microbatches, schedule, ZeRO) without it, side by "
      "side in this experiment; at a small model the canonical pieces and column tiles make small products, so the "
      "cost is higher than at the original configuration's (docs/determinism.md). Layouts that cannot be made exact "
      "yet (a vocabulary-parallel head, spd/parallel blocks) are refused, not run.\n\n";
  return md;
}

// The two tables with their notes.
std::string tables_md(const std::vector<std::vector<std::string>>& time_rows,
                      const std::vector<std::vector<std::string>>& mem_rows) {
  std::string md;
  md += "## Step time, bubble and pipeline communication\n\n";
  md += md_table({"Configuration", "Layout", "Schedule", "Runs ok", "Step ms (median)",
                  "Bubble per stage, measured", "Bubble, theory", "Arenas in flight per stage (theory)",
                  "pp calls (formula)", "pp MB (formula)", "Largest loss deviation vs 1 rank"},
                 time_rows, "lllrrrrrrrr");
  md +=
      "\nBubble: the share of a step a stage's ranks spent waiting for a pipeline peer (inside a receive, or for "
      "a send whose buffer was needed again), the median over the steps after the first; theory: (p-1)/(m+p-1) "
      "for gpipe and 1f1b, (p-1)/(3m+p-1) for zb-h1, which assume forward, input-gradient and weight-gradient "
      "passes of equal time; (p-1)/(vm+p-1) for interleaved-1f1b with v chunks a rank; for zb-v its lists on the "
      "simulator at the pass times they were built for (parallel.pass_times, or the op table's counts). Arenas: "
      "the most microbatches a stage held at once (counted while it ran) and, in brackets, the schedule's bound "
      "(with virtual stages, chunk arenas: each chunk's own peak, added). pp calls and MB: rank 0's (the first stage's) pipeline-group calls in a "
      "step and their bytes (MB = 10^6 bytes); the formula is 2m messages of one microbatch's activations "
      "(rows x seq_len x n_embd floats) plus two doubles (the loss and the gradient norm). Loss deviation: the "
      "largest relative difference of the median training-loss curve from that of the first one-rank run of the "
      "same configuration but the layout and how the step is computed (threads, microbatches, recomputation, "
      "train.deterministic, the products' provider: \"(reference)\"; empty where none completed). "
      "(oversubscribed): more ranks x threads than this machine's cores; such runs show correctness, not "
      "speed.\n\n";
  md += "## Memory per rank\n\n";
  md += md_table({"Configuration", "Rank", "Stage", "ZeRO", "Parameters MB", "Gathered MB", "Gradients MB",
                  "Gradient slots MB", "Moments MB (formula)", "Model state MB (ZeRO formula)", "Arenas x MB",
                  "Activations MB", "dp MB per step (formula)"},
                 mem_rows, "lrrrrrrrrrrrr");
  md +=
      "\nCounted from the buffers each rank allocated (the run summary's memory record). Parameters and "
      "gradients: what the rank holds (ZeRO-2 and 3: 1/N shards of every layer); gathered: ZeRO-3's two "
      "parameter slots (a layer in use, the next one prefetched); gradient slots: ZeRO-2/3's two working "
      "gradients (one computing, one reduce-scattering). Moments: Adam's two fp32 moments, 8 bytes per "
      "parameter of the rank's stage and shard, 1/N with ZeRO over N data-parallel ranks. Model state: "
      "parameters + gradients + moments held, beside ZeRO's formula per parameter (Rajbhandari et al. 2020: "
      "16, 8 + 8/N, 4 + 12/N, 16/N bytes for stages 0 to 3; stage 2 under a pipeline schedule keeps the "
      "stage's gradient: stage 1's). dp MB: rank 0's data-parallel bytes in a step, each collective counted "
      "once by its buffer; the formula is Ψ floats (the rank's parameters) for an allreduce, 2Ψ for ZeRO-1/2 "
      "(reduce-scatter and all-gather), 3Ψ for ZeRO-3 (two all-gathers and a reduce-scatter), scalars aside. "
      "Activations: the arenas the schedule allocates (one per microbatch in flight) times one arena's "
      "bytes; with virtual stages the chunks' arenas differ: Arenas x MB names the largest, Activations adds "
      "every arena's own bytes.\n\n";
  return md;
}

}  // namespace

void write_parallelism(const ReportSpec& spec, const Inputs& in, std::vector<fs::path>& written) {
  std::vector<std::string> not_run;
  const std::vector<RunView> views = views_of(spec, in, not_run);
  std::string csv = csv_row({"configuration", "ranks", "dp", "tp", "pp", "microbatches", "schedule", "zero",
                             "oversubscribed", "runs_ok", "step_ms_median", "stage", "bubble_measured",
                             "bubble_theory", "arenas_counted", "arenas_theory", "pp_calls", "formula_pp_calls",
                             "pp_bytes", "formula_pp_bytes", "params_bytes", "grads_bytes", "moments_bytes",
                             "formula_moments_bytes", "activations_bytes", "max_loss_deviation"});
  std::vector<std::vector<std::string>> time_rows, mem_rows, tp_rows, cp_rows;
  for (const RunView& v : views) {
    time_rows.push_back(time_row(v));
    memory_rows(v, mem_rows, csv);
    if (v.lay.tp > 1) tp_rows.push_back(tp_row(v));
    if (v.lay.cp > 1) cp_rows.push_back(cp_row(v));
  }
  const std::vector<std::string> svgs = draw_timelines(spec, views, written);
  std::string md = preamble(spec, in.runs, "parallel layouts: pipeline schedules, ZeRO-1, the grid");
  md += time_rows.empty() ? fmt::format("Nothing to compare: {}.\n\n", kNoRuns) : tables_md(time_rows, mem_rows);
  if (!tp_rows.empty()) {
    md += "## Tensor-parallel communication and activations\n\n";
    md += md_table({"Configuration", "Step ms (median)", "tp calls (plan)", "tp MB (plan)",
                    "Activations MB, rank 0 (plan)", "of them the layers' MB (plan)"},
                   tp_rows, "lrrrrr");
    md += "\nRank 0's tensor-parallel calls and bytes in the last step (each collective counted once by its buffer: "
          "an all-reduce, a reduce-scatter and an all-gather of N x C floats each count N x C), and its activation "
          "arena, all beside the run's plan (`plan`, docs/plan.md); ≠ marks a count that differs from it. With "
          "parallel.sequence_parallel the residual stream and the norms hold 1/tp of the rows "
          "(docs/tensor_parallel.md).\n\n";
  }
  if (!cp_rows.empty()) {
    md += "## Context-parallel communication and activations\n\n";
    md += md_table({"Configuration", "Step ms (median)", "cp calls (plan)", "cp MB (plan)",
                    "Activations MB, rank 0 (plan)"},
                   cp_rows, "lrrrr");
    md += "\nRank 0's ring in the last step: per layer the key/value block shifted cp - 1 times forward, cp - 1 "
          "times backward with cp shifts of its gradient, each a non-blocking send and a receive of the block, "
          "beside the run's plan; its activation arena beside the plan's. Each rank holds 2 of the 2 cp chunks of "
          "every row (docs/context_parallel.md).\n\n";
  }
  for (const std::string& s : svgs) {
    md += fmt::format("![{} timeline](parallelism_timeline_{}.svg)\n\n", s, s);
  }
  if (!svgs.empty()) {
    md += "Timelines: step 1 (the second) of one run per schedule, a row per rank, each on its own clock from the "
          "step's start: F forward, B input gradients (BW: the whole backward), W weight gradients, grey waiting for "
          "a peer.\n\n";
  }
  const std::string reading = zb_reading(views);
  if (!reading.empty()) {
    md += "## Reading: zb-h1 against 1f1b on two stages\n\n" + reading +
          "\nThe bubble is measured, not modelled: it includes the stages' imbalance (the last stage carries the "
          "head and the loss) and the time a receive ends late, which no schedule removes (docs/pipeline.md).\n\n";
  }
  std::string bits_csv = csv_row({"configuration", "ranks", "dp", "tp", "pp", "microbatches", "schedule", "zero",
                                  "step_ms_median", "step_ms_median_without", "runs_bits_equal", "runs_hashed",
                                  "reference"});
  const std::string bits = bits_section(spec, views, bits_csv);
  md += bits;
  md += joined("Not in the tables: ", not_run);
  if (!bits.empty()) write_report(spec.reports_dir / "parallelism_bits.csv", bits_csv, written);
  write_report(spec.reports_dir / "parallelism.csv", csv, written);
  write_report(spec.reports_dir / "parallelism.md", md, written);
}

}  // namespace gpt2::harness
