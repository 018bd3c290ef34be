#include "util/yaml_file.h"

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "util/files.h"
#include "util/text.h"

namespace gpt2 {

namespace {

// Refuses aliases (`*name`) while the text is parsed, before any node is
// built: nested aliases expand exponentially when a tree is walked (a few
// hundred bytes can hold billions of nodes), and no configuration or
// experiment of ours needs them.
class AliasRefuser final : public YAML::EventHandler {
 public:
  explicit AliasRefuser(std::string file) : file_(std::move(file)) {}
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    throw std::invalid_argument(fmt::format("{}:{}:{}: YAML aliases (*name) are not accepted; write the value out",
                                            file_, mark.line + 1, mark.column + 1));
  }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

 private:
  std::string file_;
};

}  // namespace

YAML::Node load_yaml_file(const std::filesystem::path& file, const std::string& what) {
  // Bounded and typed before reading (util/files.h): a directory, a device or
  // a FIFO is refused by its kind, a huge file by its size.
  const std::string text = read_input_file(file, kMaxTextInputBytes, "", fmt::format("a YAML file (the {})", what));
  try {
    std::istringstream events(text);
    YAML::Parser parser(events);
    AliasRefuser refuser(file.string());
    while (parser.HandleNextDocument(refuser)) {
    }
    return YAML::Load(text);
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
            fmt::format("{}:{}: duplicate key '{}' (first at line {})", file, line, excerpt(key), it->second));
      }
    }
    if (nested) refuse_duplicate_keys(kv.second, file, "", true);
  }
}

}  // namespace gpt2
