#include "app/config_file.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <stdexcept>

namespace gpt2 {

namespace {

// yaml-cpp keeps both entries of a repeated key and lookups see the first, so
// `steps: 5` twice in one section would silently mean the first. Refuse it,
// naming both lines. `prefix` makes a section's keys read as "train.steps".
void refuse_duplicate_keys(const YAML::Node& map, const std::string& path, const std::string& prefix) {
  std::map<std::string, int> first_line;
  for (const auto& kv : map) {
    const std::string key = prefix + kv.first.as<std::string>();
    const int line = kv.first.Mark().line + 1;
    const auto [it, fresh] = first_line.emplace(key, line);
    if (!fresh) {
      throw std::invalid_argument(
          fmt::format("{}:{}: duplicate key '{}' (first at line {})", path, line, key, it->second));
    }
  }
}

}  // namespace

void load_yaml(RunConfig& c, const std::string& path) {
  // A directory opens as a stream on Linux and fails only when read, with
  // the library's "basic_filebuf::underflow": name the mistake instead.
  if (std::filesystem::is_directory(path)) {
    throw std::invalid_argument(fmt::format("{}: is a directory, expected a YAML file", path));
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw std::invalid_argument(fmt::format("{}: cannot read the configuration file", path));
  } catch (const YAML::ParserException& e) {
    throw std::invalid_argument(
        fmt::format("{}:{}:{}: YAML syntax error: {}", path, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (root.IsNull()) return;  // an empty file sets nothing
  const Fields fields = run_fields(c);
  const std::vector<std::string> sections = fields.sections();
  if (!root.IsMap()) {
    throw std::invalid_argument(fmt::format("{}:{}: expected a mapping of sections (model, data, train, "
                                            "optimizer, generate)", path, root.Mark().line + 1));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  refuse_duplicate_keys(root, path, "");
  for (const auto& sec : root) {
    const std::string name = sec.first.as<std::string>();
    const std::string at = fmt::format("{}:{}", path, sec.first.Mark().line + 1);
    if (std::find(sections.begin(), sections.end(), name) == sections.end()) {
      const std::string hint = closest_key(name, sections);
      throw std::invalid_argument(fmt::format("{}: unknown section '{}'{}", at, name,
                                              hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
    }
    if (sec.second.IsNull()) continue;
    if (!sec.second.IsMap()) {
      throw std::invalid_argument(fmt::format("{}: section '{}' must be a mapping of keys", at, name));
    }
    refuse_duplicate_keys(sec.second, path, name + ".");
    for (const auto& kv : sec.second) {
      const std::string key = name + "." + kv.first.as<std::string>();
      const std::string where = fmt::format("{}:{}", path, kv.first.Mark().line + 1);
      if (!kv.second.IsScalar()) {
        throw std::invalid_argument(fmt::format("{}: {}: expected a single value", where, key));
      }
      const std::string value = kv.second.as<std::string>();
      fields.set(key, value, where);
      if (key == "data.corpus" && !value.empty() && std::filesystem::path(value).is_relative() && !dir.empty()) {
        c.data.corpus = (std::filesystem::path(dir) / value).lexically_normal().string();
      }
    }
  }
}

}  // namespace gpt2
