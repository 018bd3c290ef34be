// Stage experiments: parsing, expansion into runs, validation (see experiment.h).
#include "runner/experiment.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>
#include <stdexcept>

#include "runner/job_loop.h"
#include "runner/slurm_options.h"
#include "reports/report.h"
#include "records/tables.h"
#include "util/hash.h"
#include "util/json.h"
#include "util/text.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kTopKeys = {"kind", "name", "description", "base", "config", "reports", "repetitions",
                                           "seeds", "timeout_s", "checkpoints", "runs", "needs", "launcher", "slurm"};
const std::vector<std::string> kRunKeys = {"stage", "ranks", "threads", "hostfile", "config"};

std::string run_id(const RunSpec& r, const std::string& build_id) {
  const std::string key = fmt::format("{}|{}|{}|{}|{}|{}|{}", r.stage, r.ranks, r.threads, r.repetition, r.hostfile,
                                      r.config, build_id);
  // The layout is in the hash through the configuration; a tensor-parallel
  // run's id also shows it (ids of tp-1 runs are as they were before).
  const std::string tp = r.tp > 1 ? fmt::format("-tp{}", r.tp) : "";
  const std::string pp = r.pp > 1 ? fmt::format("-pp{}", r.pp) : "";
  return fmt::format("{}-r{}-t{}{}{}-rep{}-{}", r.stage, r.ranks, r.threads, tp, pp, r.repetition, id_hash(key));
}

// The experiment's reports: known kinds only.
std::vector<std::string> read_reports(const ExperimentFile& f) {
  std::vector<std::string> out;
  const YAML::Node& node = f.root["reports"];
  if (!node) return out;
  if (!node.IsSequence()) f.rd.fail(node, "reports: expected a list, e.g. [table1]");
  for (const auto& r : node) {
    const std::string k = f.rd.scalar(r, "reports");
    const std::vector<std::string>& known = report_kinds();
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      f.rd.fail(r, fmt::format("reports: unknown report '{}' (expected {})", excerpt(k), report_kinds_text()));
    }
    out.push_back(k);
  }
  return out;
}

// The command line's --set KEY=VALUE overrides.
std::vector<Override> cli_overrides(const std::vector<std::string>& cli) {
  std::vector<Override> out;
  for (const std::string& kv : cli) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw std::invalid_argument(fmt::format("--set: '{}' is not KEY=VALUE (e.g. data.corpus=PATH)", excerpt(kv)));
    }
    // A configuration key (section.name), never one of the stage program's own options (--config, --out, --help).
    const std::string key = kv.substr(0, eq);
    const size_t dot = key.find('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == key.size() || key.find_first_of(" /=-") != std::string::npos) {
      throw std::invalid_argument(fmt::format(
          "--set: '{}' is not a configuration key (section.name, e.g. train.steps=50; see build/stages/serial "
          "train --help)", excerpt(key)));
    }
    std::string value = kv.substr(eq + 1);
    // A relative path on the command line means the current folder: made absolute here, so the plan
    // checks, and every run uses, the same file (a run's folder is not the current one).
    if (key == "data.corpus" && !value.empty() && fs::path(value).is_relative()) value = fs::absolute(value).string();
    out.push_back(Override{key, value, YAML::Node()});
  }
  return out;
}

// Why the experiment cannot run: the `needs:` keys the command line did not set ("" if none).
std::string missing_needs(const ExperimentFile& f, const std::vector<Override>& from_cli) {
  const YAML::Node& needs = f.root["needs"];
  if (!needs) return "";
  if (!needs.IsMap()) f.rd.fail(needs, "needs: expected a mapping of key: what to pass");
  std::string why;
  for (const auto& kv : needs) {
    const std::string key = f.rd.scalar(kv.first, "needs");
    const bool given = std::any_of(from_cli.begin(), from_cli.end(), [&](const Override& o) { return o.key == key; });
    if (given) continue;
    why += fmt::format("{}{}, {}: pass --set {}=VALUE", why.empty() ? "needs " : "; ", key,
                       f.rd.scalar(kv.second, key), key);
  }
  return why;
}

// One run entry of `runs:` as read, before its matrix is expanded.
struct RunEntry {
  const YAML::Node& node;
  std::string stage, hostfile;
  std::vector<int> ranks;
  std::vector<std::optional<int>> threads;
  std::vector<Override> overrides;  // base's config, the run's, the command line's
};

RunEntry read_run_entry(const Reader& rd, const YAML::Node& run, const StageBase& base,
                        const std::vector<Override>& from_cli) {
  if (!run.IsMap()) rd.fail(run, "runs: each run is a mapping with at least 'stage'");
  rd.known_keys(run, kRunKeys, "a run");
  if (!run["stage"]) rd.fail(run, "a run needs 'stage' (serial, mpi, cuda or mpi_cuda)");
  RunEntry e{run, rd.scalar(run["stage"], "stage"), "", {1}, {std::nullopt}, base.overrides};
  if (std::find(kStages.begin(), kStages.end(), e.stage) == kStages.end()) {
    rd.fail(run["stage"], fmt::format("stage: unknown stage '{}'{}", excerpt(e.stage),
                                      did_you_mean(e.stage, kStages, " (expected serial, mpi, cuda or mpi_cuda)")));
  }
  if (run["ranks"]) e.ranks = rd.axis(run["ranks"], "ranks", 1);
  if (run["threads"]) {
    e.threads.clear();
    for (int t : rd.axis(run["threads"], "threads", 0)) e.threads.push_back(t);
  }
  if (run["config"]) {
    for (Override& o : rd.overrides(run["config"], "the run's config")) e.overrides.push_back(std::move(o));
  }
  e.overrides.insert(e.overrides.end(), from_cli.begin(), from_cli.end());
  if (run["hostfile"]) {
    if (e.stage != "mpi" && e.stage != "mpi_cuda") {
      rd.fail(run["hostfile"], fmt::format("hostfile: the {} stage does not use MPI", e.stage));
    }
    e.hostfile = rd.path(run["hostfile"], "hostfile").string();
    if (!fs::is_regular_file(e.hostfile)) rd.fail(run["hostfile"], fmt::format("hostfile: no such file '{}'", excerpt(e.hostfile, 200)));
  }
  return e;
}

// 16 hex digits of FNV-1a over every "section.key=value" of the resolved
// configuration except train.seed (the seeds axis repeats a configuration).
std::string config_digest(const ResolvedConfig& cfg) {
  std::string text;
  for (const auto& [key, value] : config_entries(cfg.root)) {
    if (key != "train.seed") text += key + "=" + value + "\n";
  }
  return fmt::format("{:016x}", fnv1a64(text.data(), text.size()));
}

// The layout columns of a run from its plan: the tensor- and pipeline-parallel
// sizes, and context parallelism, the pipeline and ZeRO as one text ("pp2 m4
// zb-h1", "pp2 v2 m8 zb-v", "zero", "pp2 m2 1f1b zero2", "m4" for accumulation on one stage,
// "cp2", "cp2 pp2 m2 1f1b"; ZeRO only where it is in force, over more than
// one data-parallel rank).
void set_layout(RunSpec& s, const Json& plan) {
  const Json& l = plan["layout"];
  s.tp = l["tp"].get<int>();
  s.pp = l["pp"].get<int>();
  const int m = l["microbatches"].get<int>(), zero = l["zero"].get<int>();
  // Microbatches on one stage are gradient accumulation: no schedule to name.
  // Virtual stages: "pp2 v2 m8 zb-v", and zb-v's given pass times ("... times 1,1.3,0.5").
  const int v = l.value("virtual_stages", 1);
  const std::string times = l.value("pass_times", std::string());
  if (s.pp > 1) {
    s.pipeline = fmt::format("pp{}{} m{} {}{}", s.pp, v > 1 ? fmt::format(" v{}", v) : "", m,
                             l["schedule"].get<std::string>(), times.empty() ? "" : " times " + times);
  }
  if (s.pp == 1 && m > 1) s.pipeline = fmt::format("m{}", m);
  const int cp = l.value("cp", 1);
  if (cp > 1) s.pipeline = fmt::format("cp{}{}{}", cp, s.pipeline.empty() ? "" : " ", s.pipeline);
  if (zero > 0) {
    s.pipeline = fmt::format("{}{}zero{}", s.pipeline, s.pipeline.empty() ? "" : " ", zero == 1 ? "" : std::to_string(zero));
  }
  s.variant = field_text(plan, "variant");
}

// The harness sets train.save_checkpoint from the experiment's
// `checkpoints:` after every other setting, so a run writes its periodic
// checkpoints only with `checkpoints: true`: a train.checkpoint_every
// without it, or a train.save_checkpoint that says otherwise, would be
// dropped without a word, and is refused at its line (or its --set).
// train.checkpoint_format, async_checkpoint and keep_checkpoints still
// govern the checkpoint a stop signal makes a run write, so they stay.
void refuse_dropped_checkpoint_keys(const Reader& rd, bool checkpoints, const std::vector<Override>& overrides) {
  const std::string want = checkpoints ? "true" : "false";
  for (const Override& o : overrides) {
    std::string why;
    if (o.key == "train.checkpoint_every" && !checkpoints) {
      why = "periodic checkpoints need the experiment's `checkpoints: true` (without it a run writes no checkpoint "
            "but the one a stop signal asks for); add `checkpoints: true`, or remove the key";
    } else if (o.key == "train.save_checkpoint" && (o.value == "true" || o.value == "false") && o.value != want) {
      why = fmt::format("the harness sets it from the experiment's `checkpoints: {}`, after every other setting; "
                        "say `checkpoints: {}` instead", want, o.value);
    }
    if (why.empty()) continue;
    // An override from the command line (--set) has no line in the file: name the option instead.
    if (o.node.Mark().line < 0) {
      throw std::invalid_argument(fmt::format("--set {}={}: {}", o.key, excerpt(o.value), why));
    }
    rd.fail(o.node, fmt::format("{}: {}", o.key, why));
  }
}

// The runs of one entry: its ranks x threads x seeds matrix, each resolved
// and planned by the stage programs (a refusal names the file and line).
void expand_entry(Experiment& ex, const ExperimentFile& f, const StageBase& base, const RunEntry& e,
                  ConfigResolver& resolver, const std::vector<std::optional<uint64_t>>& seeds,
                  const std::string& build_id, std::set<std::string>& ids) {
  const Reader& rd = f.rd;
  refuse_dropped_checkpoint_keys(rd, ex.checkpoints, e.overrides);
  const YAML::Node& at = e.node["ranks"] ? e.node["ranks"] : e.node;
  for (int r : e.ranks) {
    for (const std::optional<int>& t : e.threads) {
      for (const std::optional<uint64_t>& seed : seeds) {
        std::vector<Override> overrides = e.overrides;
        if (t) overrides.push_back(Override{"train.threads", std::to_string(*t), e.node["threads"]});
        if (seed) overrides.push_back(Override{"train.seed", std::to_string(*seed), f.root["seeds"]});
        overrides.push_back(Override{"train.save_checkpoint", ex.checkpoints ? "true" : "false", f.root["checkpoints"]});
        const ResolvedConfig& cfg = resolve_for_run(resolver, rd, base, overrides, e.node);
        const PlanAnswer& plan = resolver.plan(base.file, overrides, e.stage, r);
        if (!plan.ok) fail_for_run(rd, base, overrides, at, plan.error);
        for (int rep = 0; rep < ex.repetitions; ++rep) {
          RunSpec s;
          s.stage = e.stage;
          s.ranks = r;
          s.threads = static_cast<int>(cfg.integer("train.threads"));
          set_layout(s, plan.json);
          s.block_types = cfg.text("parallel.block_types");
          s.repetition = rep;
          s.seed = static_cast<uint64_t>(std::stoull(cfg.text("train.seed")));
          s.hostfile = e.hostfile;
          s.config = cfg.yaml;
          s.plan = plan.text;
          s.config_digest = config_digest(cfg);
          s.steps = cfg.integer("train.steps");
          s.id = run_id(s, build_id);
          if (!ids.insert(s.id).second) rd.fail(e.node, fmt::format("this run repeats an earlier run ({})", s.id));
          ex.runs.push_back(std::move(s));
        }
      }
    }
  }
}

}  // namespace

Experiment load_experiment(const fs::path& file, const std::string& build_id, ConfigResolver& resolver,
                           const std::vector<std::string>& cli) {
  const ExperimentFile f = open_experiment(file, "stages", kTopKeys, "the experiment", "at least 'base' and 'runs'");
  const YAML::Node& root = f.root;
  const Reader& rd = f.rd;
  Experiment ex;
  static_cast<ExperimentInfo&>(ex) = f.info;
  const StageBase base = read_stage_base(f);
  ex.reports = read_reports(f);
  if (root["repetitions"]) ex.repetitions = rd.integer(root["repetitions"], "repetitions", 1);
  // No `seeds`: the configuration's own train.seed, as no `threads` keeps its train.threads.
  std::vector<std::optional<uint64_t>> seeds = {std::nullopt};
  if (root["seeds"]) {
    seeds.clear();
    for (uint64_t s : rd.seeds(root["seeds"])) seeds.push_back(s);
  }
  if (root["timeout_s"]) ex.timeout_s = rd.seconds(root["timeout_s"], "timeout_s");
  if (root["checkpoints"]) ex.checkpoints = rd.boolean(root["checkpoints"], "checkpoints");
  if (root["launcher"]) {
    ex.launcher = rd.scalar(root["launcher"], "launcher");
    if (ex.launcher != "local" && ex.launcher != "slurm") {
      rd.fail(root["launcher"], fmt::format("launcher: '{}' (expected local or slurm)", excerpt(ex.launcher)));
    }
  }
  if (const YAML::Node& s = root["slurm"]) {  // docs/cluster.md
    if (!s.IsMap()) rd.fail(s, "slurm: a mapping of partition, account, time, sbatch, ranks, signal_s");
    rd.known_keys(s, {"partition", "account", "time", "sbatch", "ranks", "signal_s"}, "the slurm section");
    // Each value checked against what Slurm takes here, before any run is resolved (runner/slurm_options.h).
    const auto value = [&rd](const YAML::Node& n, const std::string& key, const auto& problem) {
      const std::string v = rd.scalar(n, key);
      if (const std::string why = problem(v); !why.empty()) rd.fail(n, fmt::format("{}: {}", key, why));
      return v;
    };
    if (s["partition"]) {
      ex.slurm.partition = value(s["partition"], "slurm.partition",
                                 [](const std::string& v) { return slurm_name_problem(v, "a partition"); });
    }
    if (s["account"]) {
      ex.slurm.account = value(s["account"], "slurm.account",
                               [](const std::string& v) { return slurm_name_problem(v, "an account"); });
    }
    if (s["time"]) ex.slurm.time = value(s["time"], "slurm.time", slurm_time_problem);
    if (s["sbatch"]) {
      if (!s["sbatch"].IsSequence()) rd.fail(s["sbatch"], "slurm.sbatch: expected a list, e.g. [--qos=low]");
      for (const auto& option : s["sbatch"]) {
        ex.slurm.sbatch.push_back(value(option, "slurm.sbatch", sbatch_option_problem));
      }
    }
    if (s["signal_s"]) ex.slurm.signal_s = rd.integer(s["signal_s"], "slurm.signal_s", 0);
    if (s["ranks"]) {
      const std::string how = rd.scalar(s["ranks"], "slurm.ranks");
      if (how != "srun" && how != "mpiexec") {
        rd.fail(s["ranks"], fmt::format("slurm.ranks: '{}' (srun or mpiexec)", excerpt(how)));
      }
      ex.slurm.mpiexec = how == "mpiexec";
    }
  }
  if (!root["runs"] || !root["runs"].IsSequence() || root["runs"].size() == 0) {
    throw std::invalid_argument(fmt::format("{}: 'runs' must be a non-empty list of runs", file.string()));
  }
  const std::vector<Override> from_cli = cli_overrides(cli);
  ex.skip_reason = missing_needs(f, from_cli);
  if (!ex.skip_reason.empty()) return ex;  // nothing to resolve: the runs need what is missing
  std::set<std::string> ids;
  for (const auto& run : root["runs"]) {
    expand_entry(ex, f, base, read_run_entry(rd, run, base, from_cli), resolver, seeds, build_id, ids);
  }
  return ex;
}

}  // namespace gpt2::harness
