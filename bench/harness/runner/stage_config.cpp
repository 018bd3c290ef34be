// Run configurations resolved by the serial stage program (see stage_config.h).
#include "runner/stage_config.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cctype>

#include "runner/process.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

YAML::Node value_node(const YAML::Node& root, const std::string& key) {
  const size_t dot = key.find('.');
  const YAML::Node section = root[key.substr(0, dot)];
  return section && dot != std::string::npos ? section[key.substr(dot + 1)] : YAML::Node();
}

// Where `key` stands in `msg` as a whole key (not inside a longer one), or npos.
size_t mention(const std::string& msg, const std::string& key) {
  auto key_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t pos = msg.find(key); pos != std::string::npos; pos = msg.find(key, pos + 1)) {
    const size_t end = pos + key.size();
    const bool starts = pos == 0 || !(key_char(msg[pos - 1]) || msg[pos - 1] == '.');
    const bool ends = end == msg.size() || !key_char(msg[end]);
    if (starts && ends) return pos;
  }
  return std::string::npos;
}

std::string without_prefix(std::string s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

}  // namespace

std::string ResolvedConfig::text(const std::string& key) const {
  const YAML::Node n = value_node(root, key);
  if (n && n.IsNull()) return "";  // an empty list: `parallel.block_types:` with nothing after it
  if (!n || !n.IsScalar()) throw std::runtime_error(fmt::format("the resolved configuration has no '{}'", key));
  return n.as<std::string>();
}

int64_t ResolvedConfig::integer(const std::string& key) const {
  const std::string t = text(key);
  try {
    return std::stoll(t);
  } catch (const std::exception&) {
    throw std::runtime_error(fmt::format("the resolved configuration's '{}' is not an integer: '{}'", key, t));
  }
}

const ResolvedConfig& ConfigResolver::resolve(const fs::path& experiment, const fs::path& base,
                                              const std::vector<Override>& overrides) {
  if (access(serial_.c_str(), X_OK) != 0) {
    throw std::invalid_argument(fmt::format(
        "{}: the harness needs the serial stage program to resolve and check run configurations (every stage "
        "shares its configuration schema), and there is none at {} (build it, or pass --build)",
        experiment.string(), serial_.string()));
  }
  std::vector<std::string> argv = {serial_.string(), "config", "--config", base.string()};
  for (const Override& o : overrides) argv.insert(argv.end(), {"--" + o.key, o.value});
  if (auto it = resolved_.find(argv); it != resolved_.end()) return it->second;
  if (auto it = rejected_.find(argv); it != rejected_.end()) throw StageConfigError(it->second);

  const Captured c = capture(argv);
  if (c.status == 0) {
    ResolvedConfig r;
    r.yaml = c.out;
    try {
      r.root = YAML::Load(r.yaml);
    } catch (const YAML::Exception& e) {
      throw std::runtime_error(fmt::format("{} config printed no readable YAML: {}", serial_.string(), e.what()));
    }
    return resolved_.emplace(argv, std::move(r)).first->second;
  }
  // "<program>: error: <message>": the first marker starts the message, which
  // may itself hold "error: " (a YAML syntax error, say).
  const std::string marker = ": error: ";
  const size_t at = c.err.find(marker);
  if (c.status != 2 || at == std::string::npos) {
    throw std::runtime_error(fmt::format("{} config failed with exit status {}: {}", serial_.string(), c.status,
                                         c.err.empty() ? "(no message)" : c.err));
  }
  std::string message = c.err.substr(at + marker.size());
  while (!message.empty() && (message.back() == '\n' || message.back() == '\r')) message.pop_back();
  rejected_.emplace(argv, message);
  throw StageConfigError(message);
}

std::vector<std::pair<std::string, std::string>> config_entries(const YAML::Node& root) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& section : root) {
    if (!section.second.IsMap()) continue;
    for (const auto& kv : section.second) {
      out.emplace_back(section.first.as<std::string>() + "." + kv.first.as<std::string>(), YAML::Dump(kv.second));
    }
  }
  return out;
}

const PlanAnswer& ConfigResolver::plan(const fs::path& base, const std::vector<Override>& overrides,
                                       const std::string& stage, int ranks) {
  std::vector<std::string> argv = {serial_.string(), "plan", "--stage", stage, "--ranks", std::to_string(ranks),
                                   "--config", base.string()};
  for (const Override& o : overrides) argv.insert(argv.end(), {"--" + o.key, o.value});
  if (!machine_.empty()) argv.insert(argv.end(), {"--machine", machine_.string()});
  if (auto it = plans_.find(argv); it != plans_.end()) return it->second;
  const Captured c = capture(argv);
  PlanAnswer a;
  a.text = c.out;
  a.json = Json::parse(c.out, nullptr, false);
  const bool answered = a.json.is_object() && a.json.contains("ok") && a.json["ok"].is_boolean();
  if (!answered || (c.status != 0 && c.status != 2) || a.json["ok"].get<bool>() != (c.status == 0)) {
    throw std::runtime_error(fmt::format("{} plan answered neither a plan nor a refusal (exit status {}): {}",
                                         serial_.string(), c.status, c.err.empty() ? c.out.substr(0, 300) : c.err));
  }
  a.ok = c.status == 0;
  if (!a.ok) a.error = field_text(a.json, "error");
  return plans_.emplace(argv, std::move(a)).first->second;
}

StageBase read_stage_base(const ExperimentFile& f) {
  const YAML::Node& root = f.root;
  if (!root["base"]) {
    throw std::invalid_argument(
        fmt::format("{}: missing key 'base' (the stage configuration file)", f.rd.file().string()));
  }
  StageBase b{f.rd.path(root["base"], "base"), root["base"], {}};
  if (root["config"]) b.overrides = f.rd.overrides(root["config"], "config");
  return b;
}

void fail_for_run(const Reader& rd, const StageBase& base, const std::vector<Override>& overrides,
                  const YAML::Node& fallback, const std::string& msg, const std::string& fallback_prefix) {
  // The override the message names first; of a key given twice, the later (the one in effect).
  const Override* named = nullptr;
  size_t first = std::string::npos;
  for (const Override& o : overrides) {
    const size_t pos = mention(msg, o.key);
    if (o.node.IsDefined() && pos != std::string::npos && (named == nullptr || pos <= first)) {
      named = &o;
      first = pos;
    }
  }
  if (named) {
    const std::string what = without_prefix(without_prefix(msg, "command line: "), "--" + named->key + ": ");
    // An override from the command line (--set) has no line in the file: name the option instead.
    if (named->node.Mark().line < 0) {
      throw std::invalid_argument(fmt::format("--set {}={}: {}", named->key, named->value, what));
    }
    rd.fail(named->node, what);
  }
  if (msg.rfind(base.file.string() + ":", 0) == 0) rd.fail(base.node, "base: " + msg);
  rd.fail(fallback, fallback_prefix + msg);
}

const ResolvedConfig& resolve_for_run(ConfigResolver& resolver, const Reader& rd, const StageBase& base,
                                      const std::vector<Override>& overrides, const YAML::Node& run_node) {
  try {
    return resolver.resolve(rd.file(), base.file, overrides);
  } catch (const StageConfigError& e) {
    fail_for_run(rd, base, overrides, run_node, e.what(), "this run's configuration is invalid: ");
  }
}

}  // namespace gpt2::harness
