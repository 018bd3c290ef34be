// Reading experiment files (experiments/*.yaml) with errors that name the
// file, the line and the key ("<file>:<line>: <key>: expected ..."). Shared
// by every kind of experiment (stages, kernels, peer, mpi_step). Values of
// the stage configuration (`config:` overrides) are only collected here, as
// text: the stage program checks them (stage_config.h).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace gpt2::harness {

// Parses a whole experiment file; a syntax error names file:line:column.
// Throws std::invalid_argument.
YAML::Node load_experiment_yaml(const std::filesystem::path& file);

// The experiment's kind: `kind:` or "stages" when absent. Throws
// std::invalid_argument naming file:line for an unknown kind.
std::string experiment_kind(const std::filesystem::path& file);
inline const std::vector<std::string> kKinds = {"stages", "kernels", "peer", "mpi_step"};

// " (did you mean 'x'?)" with the known word closest to `word`, or
// `otherwise` when none is close: the tail of an "unknown ..." error.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& known,
                         const std::string& otherwise = "");

// One `section.key: value` override of a stage configuration, and the node
// of its key (for errors that point at it).
struct Override {
  std::string key, value;
  YAML::Node node;
};

// Whether `name` can name one folder or file inside another, and nothing
// else: non-empty, at most 100 characters of letters, digits, '_', '-' and
// '.', not starting with '.' or '-' (so never "." or ".." or hidden).
bool is_plain_name(const std::string& name);

// `root / name` for a name that must stay under `root` (an experiment's
// results or reports folder, a job's folder): throws std::invalid_argument
// for a name that is not plain.
std::filesystem::path child_of(const std::filesystem::path& root, const std::string& name);

class Reader {
 public:
  explicit Reader(std::filesystem::path file) : file_(std::move(file)) {}
  const std::filesystem::path& file() const { return file_; }
  // "<file>:<line>" of a node.
  std::string at(const YAML::Node& n) const;
  [[noreturn]] void fail(const YAML::Node& n, const std::string& what) const;
  // Fails at the first key of `map` not in `keys`, with a "did you mean" hint.
  void known_keys(const YAML::Node& map, const std::vector<std::string>& keys, const std::string& where) const;

  std::string scalar(const YAML::Node& n, const std::string& key) const;
  int integer(const YAML::Node& n, const std::string& key, int min) const;
  bool boolean(const YAML::Node& n, const std::string& key) const;
  // A number of seconds > 0 (`allow_zero`: >= 0).
  double seconds(const YAML::Node& n, const std::string& key, bool allow_zero = false) const;
  // A finite number >= 0.
  double non_negative(const YAML::Node& n, const std::string& key) const;
  // A list of single values.
  std::vector<std::string> strings(const YAML::Node& n, const std::string& key) const;
  // An integer or a list of integers: one matrix axis.
  std::vector<int> axis(const YAML::Node& n, const std::string& key, int min) const;
  // A seed or a list of seeds (train.seed is 64-bit).
  std::vector<uint64_t> seeds(const YAML::Node& n) const;
  // A mapping of `section.key: value` overrides, in order; a relative
  // data.corpus is resolved against this file's folder, and a list value
  // ([tp, spd]) becomes the comma-separated text the stages take ("tp,spd").
  std::vector<Override> overrides(const YAML::Node& n, const std::string& where) const;
  // A path; relative ones are resolved against this file's folder.
  std::filesystem::path path(const YAML::Node& n, const std::string& key) const;

 private:
  std::filesystem::path file_;
};

// What every experiment file starts with, read and checked: the file parsed
// as a mapping (`needs` says what it must hold, e.g. "at least 'base' and
// 'runs'"), no key outside `keys` (with a "did you mean" hint; `what` names
// the file's kind in that error, e.g. "a kernels experiment"), the `kind` it
// must have ("stages" when absent), its name (`name`, or the file's stem: a
// plain word, it names a directory) and its description.
struct ExperimentInfo {
  std::string name, description;
  std::filesystem::path file;
};
struct ExperimentFile {
  YAML::Node root;
  Reader rd;
  ExperimentInfo info;
};
ExperimentFile open_experiment(const std::filesystem::path& file, const std::string& kind,
                               const std::vector<std::string>& keys, const std::string& what,
                               const std::string& needs);

}  // namespace gpt2::harness
