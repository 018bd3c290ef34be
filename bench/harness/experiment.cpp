#include "experiment.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>
#include <stdexcept>

#include "checkpoint.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kTopKeys = {"name", "description", "base", "config", "reports", "repetitions",
                                           "seeds", "timeout_s", "checkpoints", "runs"};
const std::vector<std::string> kRunKeys = {"stage", "ranks", "threads", "hostfile", "config"};
const std::vector<std::string> kReports = {"table1", "table2", "scaling"};

class Reader {
 public:
  explicit Reader(fs::path file) : file_(std::move(file)) {}
  std::string at(const YAML::Node& n) const { return fmt::format("{}:{}", file_.string(), n.Mark().line + 1); }
  [[noreturn]] void fail(const YAML::Node& n, const std::string& what) const {
    throw std::invalid_argument(fmt::format("{}: {}", at(n), what));
  }
  void known_keys(const YAML::Node& map, const std::vector<std::string>& keys, const std::string& where) const {
    for (const auto& kv : map) {
      const std::string k = kv.first.as<std::string>();
      if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
      const std::string hint = closest_key(k, keys);
      fail(kv.first, fmt::format("unknown key '{}' in {}{}", k, where,
                                 hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
    }
  }
  std::string scalar(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar()) fail(n, fmt::format("{}: expected a single value", key));
    return n.as<std::string>();
  }
  int integer(const YAML::Node& n, const std::string& key, int min) const {
    const std::string s = scalar(n, key);
    try {
      size_t used = 0;
      const long v = std::stol(s, &used);
      if (used == s.size() && v >= min && v <= 1 << 30) return static_cast<int>(v);
    } catch (const std::exception&) {
    }
    fail(n, fmt::format("{}: expected an integer >= {}, got '{}'", key, min, s));
  }
  // An integer or a list of integers: one matrix axis.
  std::vector<int> axis(const YAML::Node& n, const std::string& key, int min) const {
    std::vector<int> out;
    if (n.IsSequence()) {
      for (const auto& x : n) out.push_back(integer(x, key, min));
      if (out.empty()) fail(n, fmt::format("{}: the list is empty", key));
    } else {
      out.push_back(integer(n, key, min));
    }
    return out;
  }
  // A seed or a list of seeds (train.seed is 64-bit).
  std::vector<uint64_t> seeds(const YAML::Node& n) const {
    std::vector<uint64_t> out;
    auto one = [&](const YAML::Node& x) {
      const std::string s = scalar(x, "seeds");
      try {
        size_t used = 0;
        const uint64_t v = std::stoull(s, &used);
        if (used == s.size() && s[0] != '-') return v;
      } catch (const std::exception&) {
      }
      fail(x, fmt::format("seeds: expected a non-negative integer, got '{}'", s));
    };
    if (n.IsSequence()) {
      for (const auto& x : n) out.push_back(one(x));
      if (out.empty()) fail(n, "seeds: the list is empty");
    } else {
      out.push_back(one(n));
    }
    return out;
  }
  // section.key: value overrides, validated against the stage's key list.
  void apply_config(const YAML::Node& n, RunConfig& c, const std::string& where) const {
    if (!n.IsMap()) fail(n, fmt::format("{}: expected a mapping of section.key: value", where));
    for (const auto& kv : n) {
      const std::string key = kv.first.as<std::string>();
      std::string value = scalar(kv.second, key);
      if (key == "data.corpus" && fs::path(value).is_relative()) {
        value = (file_.parent_path() / value).lexically_normal().string();
      }
      set_field(c, key, value, at(kv.first));
    }
  }
  fs::path path(const YAML::Node& n, const std::string& key) const {
    fs::path p = scalar(n, key);
    return p.is_relative() ? (file_.parent_path() / p).lexically_normal() : p;
  }

 private:
  fs::path file_;
};

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
  Experiment ex;
  ex.file = file;
  ex.name = root["name"] ? rd.scalar(root["name"], "name") : file.stem().string();
  if (ex.name.empty() || ex.name.find_first_of("/\\ ") != std::string::npos) {
    rd.fail(root["name"], fmt::format("name: '{}' must be a plain word (it names a directory)", ex.name));
  }
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
  std::vector<uint64_t> seeds = {common.seed};
  if (root["seeds"]) seeds = rd.seeds(root["seeds"]);
  if (root["timeout_s"]) {
    const std::string s = rd.scalar(root["timeout_s"], "timeout_s");
    char* end = nullptr;
    ex.timeout_s = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !(ex.timeout_s > 0)) rd.fail(root["timeout_s"], fmt::format("timeout_s: expected seconds > 0, got '{}'", s));
  }
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
    std::vector<int> threads = run["threads"] ? rd.axis(run["threads"], "threads", 0) : std::vector<int>{common.threads};
    RunConfig per_run = common;
    if (run["config"]) rd.apply_config(run["config"], per_run, "the run's config");
    std::string hostfile;
    if (run["hostfile"]) {
      if (!parallel) rd.fail(run["hostfile"], fmt::format("hostfile: the {} stage does not use MPI", stage));
      hostfile = rd.path(run["hostfile"], "hostfile").string();
      if (!fs::is_regular_file(hostfile)) rd.fail(run["hostfile"], fmt::format("hostfile: no such file '{}'", hostfile));
    }
    for (int r : ranks) {
      if (per_run.batch_size % r != 0) {
        rd.fail(run["ranks"] ? run["ranks"] : run, fmt::format("ranks: train.batch_size {} is not divisible by {} ranks",
                                                              per_run.batch_size, r));
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
            s.config.threads = t;
            s.config.seed = s.seed;
            try {
              validate(s.config);
            } catch (const std::invalid_argument& e) {
              rd.fail(run, fmt::format("this run's configuration is invalid: {}", e.what()));
            }
            if (!fs::is_regular_file(s.config.corpus)) {
              rd.fail(run, fmt::format("data.corpus: no such file '{}'", s.config.corpus));
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
