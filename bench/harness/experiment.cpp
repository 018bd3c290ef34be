// Stage experiments: parsing, expansion into runs, validation (see experiment.h).
#include "experiment.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>
#include <stdexcept>

#include "job_loop.h"
#include "report.h"
#include "tables.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kTopKeys = {"kind", "name", "description", "base", "config", "reports", "repetitions",
                                           "seeds", "timeout_s", "checkpoints", "runs", "needs"};
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

}  // namespace

Experiment load_experiment(const fs::path& file, const std::string& build_id, ConfigResolver& resolver,
                           const std::vector<std::string>& cli) {
  const ExperimentFile f = open_experiment(file, "stages", kTopKeys, "the experiment", "at least 'base' and 'runs'");
  const YAML::Node& root = f.root;
  const Reader& rd = f.rd;
  Experiment ex;
  static_cast<ExperimentInfo&>(ex) = f.info;
  const StageBase base = read_stage_base(f);
  if (root["reports"]) {
    if (!root["reports"].IsSequence()) rd.fail(root["reports"], "reports: expected a list, e.g. [table1]");
    for (const auto& r : root["reports"]) {
      const std::string k = rd.scalar(r, "reports");
      const std::vector<std::string>& known = report_kinds();
      if (std::find(known.begin(), known.end(), k) == known.end()) {
        rd.fail(r, fmt::format("reports: unknown report '{}' (expected {})", k, report_kinds_text()));
      }
      ex.reports.push_back(k);
    }
  }
  if (root["repetitions"]) ex.repetitions = rd.integer(root["repetitions"], "repetitions", 1);
  // No `seeds`: the configuration's own train.seed, as no `threads` keeps its train.threads.
  std::vector<std::optional<uint64_t>> seeds = {std::nullopt};
  if (root["seeds"]) {
    seeds.clear();
    for (uint64_t s : rd.seeds(root["seeds"])) seeds.push_back(s);
  }
  if (root["timeout_s"]) ex.timeout_s = rd.seconds(root["timeout_s"], "timeout_s");
  if (root["checkpoints"]) ex.checkpoints = rd.boolean(root["checkpoints"], "checkpoints");
  if (!root["runs"] || !root["runs"].IsSequence() || root["runs"].size() == 0) {
    throw std::invalid_argument(fmt::format("{}: 'runs' must be a non-empty list of runs", file.string()));
  }
  std::vector<Override> from_cli;
  for (const std::string& kv : cli) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw std::invalid_argument(fmt::format("--set: '{}' is not KEY=VALUE (e.g. data.corpus=PATH)", kv));
    }
    from_cli.push_back(Override{kv.substr(0, eq), kv.substr(eq + 1), YAML::Node()});
  }
  if (root["needs"]) {
    if (!root["needs"].IsMap()) rd.fail(root["needs"], "needs: expected a mapping of key: what to pass");
    std::vector<std::string> missing;
    for (const auto& kv : root["needs"]) {
      const std::string key = rd.scalar(kv.first, "needs");
      const bool given = std::any_of(from_cli.begin(), from_cli.end(), [&](const Override& o) { return o.key == key; });
      if (!given) missing.push_back(fmt::format("{}, {}: pass --set {}=VALUE", key, rd.scalar(kv.second, key), key));
    }
    if (!missing.empty()) {
      ex.skip_reason = "needs ";
      for (size_t i = 0; i < missing.size(); ++i) ex.skip_reason += (i ? "; " : "") + missing[i];
      return ex;  // nothing to resolve: the runs need what is missing
    }
  }

  std::set<std::string> ids;
  for (const auto& run : root["runs"]) {
    if (!run.IsMap()) rd.fail(run, "runs: each run is a mapping with at least 'stage'");
    rd.known_keys(run, kRunKeys, "a run");
    if (!run["stage"]) rd.fail(run, "a run needs 'stage' (serial, mpi, cuda or mpi_cuda)");
    const std::string stage = rd.scalar(run["stage"], "stage");
    if (std::find(kStages.begin(), kStages.end(), stage) == kStages.end()) {
      rd.fail(run["stage"], fmt::format("stage: unknown stage '{}'{}", stage,
                                        did_you_mean(stage, kStages, " (expected serial, mpi, cuda or mpi_cuda)")));
    }
    const bool parallel = stage == "mpi" || stage == "mpi_cuda";
    std::vector<int> ranks = run["ranks"] ? rd.axis(run["ranks"], "ranks", 1) : std::vector<int>{1};
    if (!parallel && (ranks.size() != 1 || ranks[0] != 1)) rd.fail(run["ranks"], fmt::format("ranks: the {} stage runs one process", stage));
    std::vector<std::optional<int>> threads = {std::nullopt};
    if (run["threads"]) {
      threads.clear();
      for (int t : rd.axis(run["threads"], "threads", 0)) threads.push_back(t);
    }
    std::vector<Override> per_run = base.overrides;
    if (run["config"]) {
      for (Override& o : rd.overrides(run["config"], "the run's config")) per_run.push_back(std::move(o));
    }
    per_run.insert(per_run.end(), from_cli.begin(), from_cli.end());
    std::string hostfile;
    if (run["hostfile"]) {
      if (!parallel) rd.fail(run["hostfile"], fmt::format("hostfile: the {} stage does not use MPI", stage));
      hostfile = rd.path(run["hostfile"], "hostfile").string();
      if (!fs::is_regular_file(hostfile)) rd.fail(run["hostfile"], fmt::format("hostfile: no such file '{}'", hostfile));
    }
    for (int r : ranks) {
      for (const std::optional<int>& t : threads) {
        for (const std::optional<uint64_t>& seed : seeds) {
          std::vector<Override> overrides = per_run;
          if (t) overrides.push_back(Override{"train.threads", std::to_string(*t), run["threads"]});
          if (seed) overrides.push_back(Override{"train.seed", std::to_string(*seed), root["seeds"]});
          overrides.push_back(
              Override{"train.save_checkpoint", ex.checkpoints ? "true" : "false", root["checkpoints"]});
          const ResolvedConfig& cfg = resolve_for_run(resolver, rd, base, overrides, run);
          const int64_t batch = cfg.integer("train.batch_size");
          int64_t tp = cfg.integer("parallel.tp");
          const YAML::Node& at = run["ranks"] ? run["ranks"] : run;
          if (tp > 1 && !parallel) {
            rd.fail(run, fmt::format("parallel.tp {}: the {} stage runs one process; tensor parallelism needs "
                                     "the mpi or mpi_cuda stage",
                                     tp, stage));
          }
          const int64_t pp = cfg.integer("parallel.pp"), m = cfg.integer("parallel.microbatches");
          if (pp > 1 && stage != "mpi") {
            rd.fail(run, fmt::format("parallel.pp {}: pipeline stages run on the mpi stage, not {}", pp, stage));
          }
          if (r % (tp * pp) != 0) {
            rd.fail(at, pp == 1 ? fmt::format("ranks: {} ranks do not split into tensor-parallel groups of "
                                              "parallel.tp {}", r, tp)
                                : fmt::format("ranks: {} ranks are not a multiple of parallel.tp {} x parallel.pp {}",
                                              r, tp, pp));
            continue;
          }
          const int64_t dp = r / (tp * pp);
          if (batch % dp != 0) {
            rd.fail(at, tp * pp == 1 ? fmt::format("ranks: train.batch_size {} is not divisible by {} ranks", batch, r)
                        : pp == 1    ? fmt::format("ranks: train.batch_size {} is not divisible by {} data-parallel "
                                                   "replicas ({} ranks / parallel.tp {})", batch, dp, r, tp)
                                     : fmt::format("ranks: train.batch_size {} is not divisible by {} data-parallel "
                                                   "replicas ({} ranks / (parallel.tp {} x parallel.pp {}))",
                                                   batch, dp, r, tp, pp));
          } else if ((batch / dp) % m != 0) {
            rd.fail(at, fmt::format("ranks: parallel.microbatches {} does not divide the {} rows of each of {} "
                                    "data-parallel replicas", m, batch / dp, dp));
          }
          const std::string corpus = cfg.text("data.corpus");
          if (!fs::is_regular_file(corpus)) rd.fail(run, fmt::format("data.corpus: no such file '{}'", corpus));
          for (int rep = 0; rep < ex.repetitions; ++rep) {
            RunSpec s;
            s.stage = stage;
            s.ranks = r;
            s.threads = static_cast<int>(cfg.integer("train.threads"));
            s.tp = static_cast<int>(tp);
            s.pp = static_cast<int>(pp);
            s.block_types = cfg.text("parallel.block_types");
            // parallel.zero as the stages read it (0..3; true = 1, false = 0): "zero" for stage 1
            // (the label of earlier results), "zero2", "zero3".
            const std::string zt = cfg.text("parallel.zero");
            const int zero = zt == "true" ? 1 : zt.size() == 1 && zt[0] >= '0' && zt[0] <= '3' ? zt[0] - '0' : 0;
            if (pp > 1 || m > 1) s.pipeline = fmt::format("pp{} m{} {}", pp, m, cfg.text("parallel.schedule"));
            if (zero > 0 && dp > 1) {
              s.pipeline += (s.pipeline.empty() ? "" : " ") + (zero == 1 ? std::string("zero") : fmt::format("zero{}", zero));
            }
            // Gpt2Config::variant_keys() (core/model/config.h) with their defaults' text; the harness
            // reads configurations as text and does not link the model.
            for (const auto& [key, plain] : std::initializer_list<std::pair<const char*, const char*>>{
                     {"arch", "gpt2"}, {"norm", "auto"}, {"norm_position", "auto"}, {"position", "auto"},
                     {"rope_theta", "10000"}, {"activation", "auto"}, {"mlp", "auto"}, {"mlp_hidden", "0"},
                     {"n_kv_head", "0"}, {"tie_embeddings", "false"}}) {
              const std::string v = cfg.text(std::string("model.") + key);
              if (v == plain) continue;
              if (!s.variant.empty()) s.variant += ' ';
              s.variant.append(key).append("=").append(v);
            }
            s.repetition = rep;
            s.seed = static_cast<uint64_t>(std::stoull(cfg.text("train.seed")));
            s.hostfile = hostfile;
            s.config = cfg.yaml;
            s.steps = cfg.integer("train.steps");
            s.id = run_id(s, build_id);
            if (!ids.insert(s.id).second) rd.fail(run, fmt::format("this run repeats an earlier run ({})", s.id));
            ex.runs.push_back(std::move(s));
          }
        }
      }
    }
  }
  return ex;
}

}  // namespace gpt2::harness
