// A run's stage configuration, resolved and checked by the stage program
// itself, so the harness needs none of the engine's code to know it:
//
//   <build>/stages/serial config --config BASE --KEY VALUE ...
//
// prints the whole configuration as YAML (every key, by section; relative
// data.corpus paths resolved against BASE's folder) and exits 0, or prints
// "serial: error: <message>" and exits 2. Every stage shares one
// configuration schema and the serial program is built in every
// configuration of the build, so it answers for all stages. Identical
// invocations are answered once per harness process (an experiment's
// repetitions share one configuration; `harness list` reads every experiment).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/json.h"
#include "runner/yaml_reader.h"

namespace gpt2::harness {

// The stage's message, after "serial: error: ".
struct StageConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ResolvedConfig {
  std::string yaml;  // the stage's output, verbatim: the run is given this (run.yaml)
  YAML::Node root;
  // A key's value ("train.batch_size"; "" for an empty value); throws
  // std::runtime_error if the stage's output lacks it.
  std::string text(const std::string& key) const;
  int64_t integer(const std::string& key) const;
};

// What `serial plan --stage S --ranks N` answered for a run (the engine's
// plan, docs/plan.md): the plan, or the refusal a run would give.
struct PlanAnswer {
  bool ok = false;
  std::string error;  // the refusal's one-line message
  std::string text;   // the plan as printed (plan.json in the run's folder)
  Json json;
};

// A resolved configuration's entries, "section.key" and the value's YAML
// text, in document order (what a run's configuration digest hashes and
// what reports compare between runs).
std::vector<std::pair<std::string, std::string>> config_entries(const YAML::Node& root);

class ConfigResolver {
 public:
  explicit ConfigResolver(std::filesystem::path serial) : serial_(std::move(serial)) {}
  // A machine file (docs/prediction.md): every plan then carries the step's predicted time.
  void set_machine(std::filesystem::path file) { machine_ = std::move(file); }

  // Resolves BASE with the overrides applied in order. Throws
  // std::invalid_argument naming `experiment` if the serial program is
  // missing; a StageConfigError with the stage's own message if it rejects
  // the configuration.
  const ResolvedConfig& resolve(const std::filesystem::path& experiment, const std::filesystem::path& base,
                                const std::vector<Override>& overrides);
  // The plan of that configuration on `ranks` ranks of `stage` (a
  // configuration resolve() accepted). Throws std::runtime_error when the
  // program answers neither a plan nor a refusal.
  const PlanAnswer& plan(const std::filesystem::path& base, const std::vector<Override>& overrides,
                         const std::string& stage, int ranks);

 private:
  std::filesystem::path serial_, machine_;
  std::map<std::vector<std::string>, ResolvedConfig> resolved_;
  std::map<std::vector<std::string>, std::string> rejected_;
  std::map<std::vector<std::string>, PlanAnswer> plans_;
};

// A stage configuration as an experiment gives it: `base` (a configuration
// file, relative to the experiment) and the `config` overrides for every run.
struct StageBase {
  std::filesystem::path file;
  YAML::Node node;                  // the `base:` entry, where errors in the base file point
  std::vector<Override> overrides;  // `config:`, in order
};
// Throws std::invalid_argument naming the file (and line) when `base` is
// missing or `config` is not a mapping.
StageBase read_stage_base(const ExperimentFile& f);

// Resolves a run's configuration (`base` with `overrides`: its `config` and
// the run's own) for an experiment file, turning the stage's error into one
// that names the experiment's file and line: the line of the override the
// message names (the latest one given, for a key given twice), else the
// base's line for an error in the base file, else the run's line ("this
// run's configuration is invalid: ..."). Throws std::invalid_argument.
// Fails (Reader::fail, std::invalid_argument) with a stage's message about a
// run: at the override the message names, else at the base for an error in
// the base file, else at `fallback` with `fallback_prefix`.
[[noreturn]] void fail_for_run(const Reader& rd, const StageBase& base, const std::vector<Override>& overrides,
                               const YAML::Node& fallback, const std::string& msg,
                               const std::string& fallback_prefix = "");

const ResolvedConfig& resolve_for_run(ConfigResolver& resolver, const Reader& rd, const StageBase& base,
                                      const std::vector<Override>& overrides, const YAML::Node& run_node);

}  // namespace gpt2::harness
