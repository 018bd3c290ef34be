#include "app/config_file.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "util/yaml_file.h"

namespace gpt2 {

void load_yaml(RunConfig& c, const std::string& path) {
  const YAML::Node root = load_yaml_file(path, "configuration file");
  if (root.IsNull()) return;  // an empty file sets nothing
  const Fields fields = run_fields(c);
  const std::vector<std::string> sections = fields.sections();
  if (!root.IsMap()) {
    throw std::invalid_argument(fmt::format("{}:{}: expected a mapping of sections (model, data, train, "
                                            "optimizer, generate)", path, root.Mark().line + 1));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  refuse_duplicate_keys(root, path, "", false);
  for (const auto& sec : root) {
    const std::string name = sec.first.as<std::string>();
    const std::string at = fmt::format("{}:{}", path, sec.first.Mark().line + 1);
    const bool retired = fields.retired(name + ".") != nullptr;  // its keys are refused (or ignored) one by one
    if (!retired && std::find(sections.begin(), sections.end(), name) == sections.end()) {
      const std::string hint = closest_key(name, sections);
      throw std::invalid_argument(fmt::format("{}: unknown section '{}'{}", at, name,
                                              hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
    }
    if (sec.second.IsNull()) continue;
    if (!sec.second.IsMap()) {
      throw std::invalid_argument(fmt::format("{}: section '{}' must be a mapping of keys", at, name));
    }
    refuse_duplicate_keys(sec.second, path, name + ".", false);
    for (const auto& kv : sec.second) {
      const std::string key = name + "." + kv.first.as<std::string>();
      const std::string where = fmt::format("{}:{}", path, kv.first.Mark().line + 1);
      const Field* field = fields.find(key);
      std::string value;
      if (kv.second.IsNull() && field != nullptr && field->type == "list") {
        // "key:" with nothing after it (how an empty list is written): the empty list.
      } else if (kv.second.IsSequence() && field != nullptr && field->type == "list") {
        // A YAML list ([tp, spd] or one item a line): its items, comma-separated.
        for (const auto& item : kv.second) {
          if (!item.IsScalar()) {
            throw std::invalid_argument(fmt::format("{}: {}: expected a list of single values", where, key));
          }
          if (!value.empty()) value += ',';
          value += item.as<std::string>();
        }
      } else if (!kv.second.IsScalar()) {
        throw std::invalid_argument(fmt::format("{}: {}: expected a single value", where, key));
      } else {
        value = kv.second.as<std::string>();
      }
      // A path (data.corpus, data.shards, the tokenizer's files) relative to the YAML file's folder.
      if (field != nullptr && field->type == "path" && !value.empty() && std::filesystem::path(value).is_relative() &&
          !dir.empty()) {
        value = (std::filesystem::path(dir) / value).lexically_normal().string();
      }
      fields.set(key, value, where);
    }
  }
}

}  // namespace gpt2
