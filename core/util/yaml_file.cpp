#include "util/yaml_file.h"

#include <fmt/format.h>

#include <map>
#include <stdexcept>

namespace gpt2 {

YAML::Node load_yaml_file(const std::filesystem::path& file, const std::string& what) {
  // A directory opens as a stream on Linux and fails only when read, with the
  // library's "basic_filebuf::underflow": name the mistake instead.
  if (std::filesystem::is_directory(file)) {
    throw std::invalid_argument(fmt::format("{}: is a directory, expected a YAML file", file.string()));
  }
  try {
    return YAML::LoadFile(file.string());
  } catch (const YAML::BadFile&) {
    throw std::invalid_argument(fmt::format("{}: cannot read the {}", file.string(), what));
  } catch (const YAML::ParserException& e) {
    throw std::invalid_argument(
        fmt::format("{}:{}:{}: YAML syntax error: {}", file.string(), e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

void refuse_duplicate_keys(const YAML::Node& node, const std::string& file, const std::string& prefix, bool nested) {
  if (nested && node.IsSequence()) {
    for (const auto& x : node) refuse_duplicate_keys(x, file, "", true);
  }
  if (!node.IsMap()) return;
  std::map<std::string, int> first_line;
  for (const auto& kv : node) {
    const int line = kv.first.Mark().line + 1;
    if (kv.first.IsScalar()) {
      const std::string key = prefix + kv.first.as<std::string>();
      const auto [it, fresh] = first_line.emplace(key, line);
      if (!fresh) {
        throw std::invalid_argument(
            fmt::format("{}:{}: duplicate key '{}' (first at line {})", file, line, key, it->second));
      }
    }
    if (nested) refuse_duplicate_keys(kv.second, file, "", true);
  }
}

}  // namespace gpt2
