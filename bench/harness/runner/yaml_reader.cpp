// Reading experiment files with errors that name file:line (see yaml_reader.h).
#include "runner/yaml_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>

#include "util/fields.h"
#include "util/text.h"
#include "util/yaml_file.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

// The whole of `s` as a finite number, or nullopt.
std::optional<double> finite_number(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace

YAML::Node load_experiment_yaml(const fs::path& file) {
  // A repeated `repetitions:` (or override in a `config:` map) would silently
  // mean the first: every mapping of the file is checked, at any depth.
  YAML::Node root = load_yaml_file(file, "experiment file");
  refuse_duplicate_keys(root, file.string(), "", true);
  return root;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& known, const std::string& otherwise) {
  const std::string hint = closest_key(word, known);
  return hint.empty() ? otherwise : fmt::format(" (did you mean '{}'?)", hint);
}

std::string experiment_kind(const fs::path& file) {
  const YAML::Node root = load_experiment_yaml(file);
  if (!root.IsMap() || !root["kind"]) return "stages";
  const Reader rd(file);
  const std::string kind = rd.scalar(root["kind"], "kind");
  if (std::find(kKinds.begin(), kKinds.end(), kind) == kKinds.end()) {
    rd.fail(root["kind"], fmt::format("kind: unknown kind '{}'{}", excerpt(kind),
                                      did_you_mean(kind, kKinds, " (expected stages, kernels, peer or mpi_step)")));
  }
  return kind;
}

ExperimentFile open_experiment(const fs::path& file, const std::string& kind, const std::vector<std::string>& keys,
                               const std::string& what, const std::string& needs) {
  ExperimentFile f{load_experiment_yaml(file), Reader(file), ExperimentInfo{"", "", file}};
  const YAML::Node& root = f.root;
  const Reader& rd = f.rd;
  if (!root.IsMap()) throw std::invalid_argument(fmt::format("{}: expected a mapping with {}", file.string(), needs));
  rd.known_keys(root, keys, what);
  const std::string k = root["kind"] ? rd.scalar(root["kind"], "kind") : "stages";
  if (k != kind) rd.fail(root["kind"], fmt::format("kind: this file is a '{}' experiment, not '{}'", excerpt(k), kind));
  std::string& name = f.info.name;
  name = root["name"] ? rd.scalar(root["name"], "name") : file.stem().string();
  if (!is_plain_name(name)) {
    rd.fail(root["name"] ? root["name"] : root,
            fmt::format("name: '{}' must be a plain word of letters, digits, '_', '-' and '.', not starting with '.' "
                        "or '-' (it names the experiment's results and reports folders)", excerpt(name)));
  }
  if (root["description"]) f.info.description = rd.scalar(root["description"], "description");
  return f;
}

bool is_plain_name(const std::string& name) {
  if (name.empty() || name.size() > 100 || name[0] == '.' || name[0] == '-') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

std::filesystem::path child_of(const std::filesystem::path& root, const std::string& name) {
  if (!is_plain_name(name)) {
    throw std::invalid_argument(fmt::format("'{}' would not name a folder inside {}", excerpt(name), root.string()));
  }
  return root / name;
}

std::string Reader::at(const YAML::Node& n) const { return fmt::format("{}:{}", file_.string(), n.Mark().line + 1); }

void Reader::fail(const YAML::Node& n, const std::string& what) const {
  throw std::invalid_argument(fmt::format("{}: {}", at(n), what));
}

void Reader::known_keys(const YAML::Node& map, const std::vector<std::string>& keys, const std::string& where) const {
  for (const auto& kv : map) {
    const std::string k = kv.first.as<std::string>();
    if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
    fail(kv.first, fmt::format("unknown key '{}' in {}{}", excerpt(k), where, did_you_mean(k, keys)));
  }
}

std::string Reader::scalar(const YAML::Node& n, const std::string& key) const {
  if (!n.IsScalar()) fail(n, fmt::format("{}: expected a single value", key));
  return n.as<std::string>();
}

int Reader::integer(const YAML::Node& n, const std::string& key, int min) const {
  constexpr int64_t kMax = 1 << 30;
  const std::string s = scalar(n, key);
  const size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
  const bool digits = s.size() > sign && s.find_first_not_of("0123456789", sign) == std::string::npos;
  if (!digits) fail(n, fmt::format("{}: expected an integer >= {}, got '{}'", key, min, excerpt(s)));
  int64_t v = kMax + 1;  // digits beyond 64 bits: out of range, like any other too-large value
  try {
    v = parse_int64(key, s);
  } catch (const std::invalid_argument&) {
  }
  if (v < min || v > kMax) fail(n, fmt::format("{}: '{}' is out of range (allowed {}..{})", key, excerpt(s), min, kMax));
  return static_cast<int>(v);
}

bool Reader::boolean(const YAML::Node& n, const std::string& key) const {
  const std::string s = scalar(n, key);
  if (s != "true" && s != "false") fail(n, fmt::format("{}: expected true or false, got '{}'", key, excerpt(s)));
  return s == "true";
}

double Reader::seconds(const YAML::Node& n, const std::string& key, bool allow_zero) const {
  const std::string s = scalar(n, key);
  const std::optional<double> v = finite_number(s);
  if (!v || !(allow_zero ? *v >= 0 : *v > 0)) {
    fail(n, fmt::format("{}: expected seconds {} 0, got '{}'", key, allow_zero ? ">=" : ">", excerpt(s)));
  }
  return *v;
}

double Reader::non_negative(const YAML::Node& n, const std::string& key) const {
  const std::string s = scalar(n, key);
  const std::optional<double> v = finite_number(s);
  if (!v || *v < 0) fail(n, fmt::format("{}: expected a number >= 0, got '{}'", key, excerpt(s)));
  return *v;
}

std::vector<std::string> Reader::strings(const YAML::Node& n, const std::string& key) const {
  if (!n.IsSequence()) fail(n, fmt::format("{}: expected a list, e.g. [a, b]", key));
  std::vector<std::string> out;
  for (const auto& x : n) out.push_back(scalar(x, key));
  return out;
}

std::vector<int> Reader::axis(const YAML::Node& n, const std::string& key, int min) const {
  std::vector<int> out;
  if (n.IsSequence()) {
    for (const auto& x : n) out.push_back(integer(x, key, min));
    if (out.empty()) fail(n, fmt::format("{}: the list is empty", key));
  } else {
    out.push_back(integer(n, key, min));
  }
  return out;
}

std::vector<uint64_t> Reader::seeds(const YAML::Node& n) const {
  std::vector<uint64_t> out;
  auto one = [&](const YAML::Node& x) {
    const std::string s = scalar(x, "seeds");
    try {
      return parse_uint64("seeds", s);  // "out of range (allowed 0..)" past 64 bits
    } catch (const std::invalid_argument& e) {
      fail(x, e.what());
    }
  };
  if (n.IsSequence()) {
    for (const auto& x : n) out.push_back(one(x));
    if (out.empty()) fail(n, "seeds: the list is empty");
  } else {
    out.push_back(one(n));
  }
  return out;
}

std::vector<Override> Reader::overrides(const YAML::Node& n, const std::string& where) const {
  if (!n.IsMap()) fail(n, fmt::format("{}: expected a mapping of section.key: value", where));
  std::vector<Override> out;
  for (const auto& kv : n) {
    const std::string key = kv.first.as<std::string>();
    // The stage's own options of `config` would not be overrides: --config would replace the base.
    if (key == "config" || key == "help") {
      fail(kv.first, fmt::format("{}: '{}' is not a configuration key (section.key, e.g. train.steps)", where, excerpt(key)));
    }
    // A list (parallel.block_types: [tp, spd]) is given to the stage as its
    // command-line text, "tp,spd"; the stage checks the names.
    std::string value;
    if (kv.second.IsSequence()) {
      for (const std::string& item : strings(kv.second, key)) {
        if (item.find(',') != std::string::npos) fail(kv.second, fmt::format("{}: '{}' holds a comma", key, excerpt(item)));
        value += (value.empty() ? "" : ",") + item;
      }
    } else {
      value = scalar(kv.second, key);
    }
    if (key == "data.corpus" && !value.empty() && fs::path(value).is_relative()) {
      value = (file_.parent_path() / value).lexically_normal().string();
    }
    out.push_back(Override{key, value, kv.first});
  }
  return out;
}

fs::path Reader::path(const YAML::Node& n, const std::string& key) const {
  fs::path p = scalar(n, key);
  return p.is_relative() ? (file_.parent_path() / p).lexically_normal() : p;
}

}  // namespace gpt2::harness
