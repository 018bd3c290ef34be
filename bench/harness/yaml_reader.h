// Reader: reads values out of a parsed experiment file with errors that name
// the file, the line and the key ("<file>:<line>: <key>: expected ...").
// Shared by the stage experiments (experiment.cpp) and the kernel
// experiments (kernels_experiment.cpp).
#pragma once

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "train/run_config.h"
#include "util/fields.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

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
  // The experiment's name: `name`, or the file's stem; a plain word (it names a directory).
  std::string experiment_name(const YAML::Node& root) const {
    const std::string name = root["name"] ? scalar(root["name"], "name") : file_.stem().string();
    if (name.empty() || name.find_first_of("/\\ ") != std::string::npos) {
      fail(root["name"], fmt::format("name: '{}' must be a plain word (it names a directory)", name));
    }
    return name;
  }
  // A number of seconds > 0 (`allow_zero`: >= 0).
  double seconds(const YAML::Node& n, const std::string& key, bool allow_zero = false) const {
    const std::string s = scalar(n, key);
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !(allow_zero ? v >= 0 : v > 0) || !std::isfinite(v)) {
      fail(n, fmt::format("{}: expected seconds {} 0, got '{}'", key, allow_zero ? ">=" : ">", s));
    }
    return v;
  }
  // A list of single values.
  std::vector<std::string> strings(const YAML::Node& n, const std::string& key) const {
    if (!n.IsSequence()) fail(n, fmt::format("{}: expected a list, e.g. [a, b]", key));
    std::vector<std::string> out;
    for (const auto& x : n) out.push_back(scalar(x, key));
    return out;
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
      run_fields(c).set(key, value, at(kv.first));
    }
  }
  fs::path path(const YAML::Node& n, const std::string& key) const {
    fs::path p = scalar(n, key);
    return p.is_relative() ? (file_.parent_path() / p).lexically_normal() : p;
  }

 private:
  fs::path file_;
};

}  // namespace gpt2::harness
