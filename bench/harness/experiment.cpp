#include "experiment.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>
#include <stdexcept>

#include "app/config_file.h"
#include "util/hash.h"
#include "yaml_reader.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kTopKeys = {"kind", "name", "description", "base", "config", "reports", "repetitions",
                                           "seeds", "timeout_s", "checkpoints", "runs"};
const std::vector<std::string> kRunKeys = {"stage", "ranks", "threads", "hostfile", "config"};
const std::vector<std::string> kReports = {"table1", "table2", "scaling"};

std::string run_id(const RunSpec& r, const std::string& build_id) {
  const std::string key = fmt::format("{}|{}|{}|{}|{}|{}|{}", r.stage, r.ranks, r.threads, r.repetition, r.hostfile,
                                      to_yaml(r.config), build_id);
  return fmt::format("{}-r{}-t{}-rep{}-{:010x}", r.stage, r.ranks, r.threads, r.repetition,
                     fnv1a64(key.data(), key.size()) & 0xffffffffffull);
}

}  // namespace

Experiment load_experiment(const fs::path& file, const std::string& build_id) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(file.string());
  } catch (const YAML::BadFile&) {
    throw std::invalid_argument(fmt::format("{}: cannot read the experiment file", file.string()));
  } catch (const YAML::ParserException& e) {
    throw std::invalid_argument(
        fmt::format("{}:{}:{}: YAML syntax error: {}", file.string(), e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  const Reader rd(file);
  if (!root.IsMap()) {
    throw std::invalid_argument(fmt::format("{}: expected a mapping with at least 'base' and 'runs'", file.string()));
  }
  rd.known_keys(root, kTopKeys, "the experiment");
  if (root["kind"] && rd.scalar(root["kind"], "kind") != "stages") {
    rd.fail(root["kind"], "kind: this file is not a stage experiment (load it as a kernels experiment)");
  }
  Experiment ex;
  ex.file = file;
  ex.name = rd.experiment_name(root);
  if (root["description"]) ex.description = rd.scalar(root["description"], "description");

  RunConfig common;
  if (!root["base"]) throw std::invalid_argument(fmt::format("{}: missing key 'base' (the stage configuration file)", file.string()));
  const fs::path base = rd.path(root["base"], "base");
  load_yaml(common, base.string());
  if (root["config"]) rd.apply_config(root["config"], common, "config");
  if (root["reports"]) {
    if (!root["reports"].IsSequence()) rd.fail(root["reports"], "reports: expected a list, e.g. [table1]");
    for (const auto& r : root["reports"]) {
      const std::string k = rd.scalar(r, "reports");
      if (std::find(kReports.begin(), kReports.end(), k) == kReports.end()) {
        rd.fail(r, fmt::format("reports: unknown report '{}' (expected table1, table2 or scaling)", k));
      }
      ex.reports.push_back(k);
    }
  }
  if (root["repetitions"]) ex.repetitions = rd.integer(root["repetitions"], "repetitions", 1);
  std::vector<uint64_t> seeds = {common.train.seed};
  if (root["seeds"]) seeds = rd.seeds(root["seeds"]);
  if (root["timeout_s"]) ex.timeout_s = rd.seconds(root["timeout_s"], "timeout_s");
  if (root["checkpoints"]) {
    const std::string s = rd.scalar(root["checkpoints"], "checkpoints");
    if (s != "true" && s != "false") rd.fail(root["checkpoints"], fmt::format("checkpoints: expected true or false, got '{}'", s));
    ex.checkpoints = s == "true";
  }
  if (!root["runs"] || !root["runs"].IsSequence() || root["runs"].size() == 0) {
    throw std::invalid_argument(fmt::format("{}: 'runs' must be a non-empty list of runs", file.string()));
  }

  std::set<std::string> ids;
  for (const auto& run : root["runs"]) {
    if (!run.IsMap()) rd.fail(run, "runs: each run is a mapping with at least 'stage'");
    rd.known_keys(run, kRunKeys, "a run");
    if (!run["stage"]) rd.fail(run, "a run needs 'stage' (serial, mpi, cuda or mpi_cuda)");
    const std::string stage = rd.scalar(run["stage"], "stage");
    if (std::find(kStages.begin(), kStages.end(), stage) == kStages.end()) {
      const std::string hint = closest_key(stage, kStages);
      rd.fail(run["stage"], fmt::format("stage: unknown stage '{}'{}", stage,
                                        hint.empty() ? " (expected serial, mpi, cuda or mpi_cuda)"
                                                     : fmt::format(" (did you mean '{}'?)", hint)));
    }
    const bool parallel = stage == "mpi" || stage == "mpi_cuda";
    std::vector<int> ranks = run["ranks"] ? rd.axis(run["ranks"], "ranks", 1) : std::vector<int>{1};
    if (!parallel && (ranks.size() != 1 || ranks[0] != 1)) rd.fail(run["ranks"], fmt::format("ranks: the {} stage runs one process", stage));
    std::vector<int> threads = run["threads"] ? rd.axis(run["threads"], "threads", 0) : std::vector<int>{common.train.threads};
    RunConfig per_run = common;
    if (run["config"]) rd.apply_config(run["config"], per_run, "the run's config");
    std::string hostfile;
    if (run["hostfile"]) {
      if (!parallel) rd.fail(run["hostfile"], fmt::format("hostfile: the {} stage does not use MPI", stage));
      hostfile = rd.path(run["hostfile"], "hostfile").string();
      if (!fs::is_regular_file(hostfile)) rd.fail(run["hostfile"], fmt::format("hostfile: no such file '{}'", hostfile));
    }
    for (int r : ranks) {
      if (per_run.train.batch_size % r != 0) {
        rd.fail(run["ranks"] ? run["ranks"] : run, fmt::format("ranks: train.batch_size {} is not divisible by {} ranks",
                                                              per_run.train.batch_size, r));
      }
      for (int t : threads) {
        for (uint64_t seed : seeds) {
          for (int rep = 0; rep < ex.repetitions; ++rep) {
            RunSpec s;
            s.stage = stage;
            s.ranks = r;
            s.threads = t;
            s.repetition = rep;
            s.seed = seed;
            s.hostfile = hostfile;
            s.config = per_run;
            s.config.train.threads = t;
            s.config.train.seed = s.seed;
            try {
              validate(s.config);
            } catch (const std::invalid_argument& e) {
              rd.fail(run, fmt::format("this run's configuration is invalid: {}", e.what()));
            }
            if (!fs::is_regular_file(s.config.data.corpus)) {
              rd.fail(run, fmt::format("data.corpus: no such file '{}'", s.config.data.corpus));
            }
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
