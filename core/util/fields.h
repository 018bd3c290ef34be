// Field lists: a settings struct names each of its fields once (key, type,
// help) and that one list drives parsing from text (YAML values, command-line
// flags), --help, the resolved copy written next to the results and the
// key/value header of a checkpoint (gemma.cpp's args.h is the model).
//
// A configuration struct of the lower layers lists its fields with a member
//   template <class F> void visit_fields(F&& f) { f("steps", steps, "help"); ... }
// (no include needed: the visitor is any callable taking a name, a reference
// and a help text, and optionally a type name such as "path"). add_section()
// binds such a struct under "<section>.<name>" keys. Tools bind their own
// option structs with add().
//
// Value types: bool (true|false), integers, floats (float fields parse as
// float directly, so a value written by get() reads back bit-identically),
// std::string, enumerations (by name), std::vector<int> and
// std::vector<std::string> (comma-separated; a YAML sequence in files).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpt2 {

struct Field {
  std::string key;   // "train.steps", or a tool's "threads"
  std::string type;  // "int", "float", "string", "bool", "path", "list"
  std::string help;
  std::function<std::string()> get;                  // the current value as text
  std::function<void(const std::string& text)> set;  // parses; throws std::invalid_argument
};

// Text -> value, throwing std::invalid_argument "<key>: expected ..., got '<text>'".
bool parse_bool(const std::string& key, const std::string& text);
int64_t parse_int64(const std::string& key, const std::string& text);
uint64_t parse_uint64(const std::string& key, const std::string& text);
double parse_double(const std::string& key, const std::string& text);
float parse_float(const std::string& key, const std::string& text);
std::vector<int> parse_int_list(const std::string& key, const std::string& text);
// Comma-separated names ("tp,spd,parallel"; blanks around items ignored);
// "" is the empty list, an empty item is an error.
std::vector<std::string> parse_name_list(const std::string& key, const std::string& text);
// Shortest text that reads back to the same value.
std::string format_float(float x);
std::string format_double(double x);
std::string format_int_list(const std::vector<int>& v);
std::string format_name_list(const std::vector<std::string>& v);

class Fields {
 public:
  template <typename X>
  void add(const std::string& key, X& ref, const std::string& help, const std::string& type = "");

  // Every field `s.visit_fields(...)` names, as "<section>.<name>".
  template <typename S>
  void add_section(const std::string& section, S& s) {
    s.visit_fields([&](const char* name, auto& ref, const char* help, const char* type = "") {
      add(section + "." + name, ref, help, type);
    });
  }

  // A key (or every key of a section, "debug.") that is no longer a setting:
  // set() and the command line refuse it with `why` (what replaces it),
  // except at the value it had by default (`inert`: key -> that number),
  // which set() ignores, so that a configuration an older version resolved
  // and wrote (a run's config.yaml) still reads.
  void retire(const std::string& key_or_section, const std::string& why,
              std::vector<std::pair<std::string, double>> inert = {});
  // The reason `key` is retired, or nullptr.
  const std::string* retired(const std::string& key) const;

  const std::vector<Field>& list() const { return list_; }
  const Field* find(const std::string& key) const;
  std::vector<std::string> keys() const;
  // The sections ("model", "train", ...) in first-seen order.
  std::vector<std::string> sections() const;
  bool is_flag(const std::string& key) const;  // a bool: may be given without a value

  // Sets one field. `where` prefixes errors ("--train.steps", "exp.yaml:12").
  // Unknown keys throw std::invalid_argument with a "did you mean" hint.
  void set(const std::string& key, const std::string& text, const std::string& where) const;

  // "  --key V    help [type: default]" lines for the given sections (all
  // when empty); the defaults are the bound values.
  std::string help(const std::vector<std::string>& sections = {}) const;
  // "section:\n  name: value\n" for every field (strings double-quoted).
  std::string to_yaml() const;
  // (key, value text) for every field, in list order.
  std::vector<std::pair<std::string, std::string>> values() const;

 private:
  std::vector<Field> list_;
  struct Retired {
    std::string key, why;
    std::vector<std::pair<std::string, double>> inert;
  };
  std::vector<Retired> retired_;
};

// Closest known key to `key` by edit distance, or "" if none is close. A key
// given without its section (or in the wrong one) still finds its name.
std::string closest_key(const std::string& key, const std::vector<std::string>& known);

// The command line of a tool or a stage: "--key value", "--key=value", bare
// "--flag" for a tool's bool fields and for `extra_flags`, and positional
// words. Options that are neither fields nor extra keys are errors naming the
// option with a "did you mean" hint. A value that starts with "--" is taken
// for a forgotten value ("--out --overwrite"): give it as "--key=--text".
// Nothing is set: the caller applies
// `settings` (after, say, a configuration file) with apply_settings().
struct CommandLine {
  std::vector<std::string> positional;
  std::vector<std::pair<std::string, std::string>> settings;  // field keys given, in order
  std::vector<std::pair<std::string, std::string>> other;     // extra keys and flags given, in order
  bool help = false;                                          // --help or -h was given
  // The value of an extra key or flag ("" for a flag), or nullptr if absent.
  const std::string* find(const std::string& key) const;
};
CommandLine parse_command_line(const std::vector<std::string>& args, const Fields& fields,
                               const std::vector<std::string>& extra_keys = {},
                               const std::vector<std::string>& extra_flags = {});
// Sets each of cl.settings; an error names the option ("--threads: ...") or
// the configuration key ("command line: train.steps: ...").
void apply_settings(const Fields& fields, const CommandLine& cl);

// ---------------------------------------------------------------- details

template <typename X>
void Fields::add(const std::string& key, X& ref, const std::string& help, const std::string& type) {
  Field f;
  f.key = key;
  f.help = help;
  if constexpr (std::is_same_v<X, bool>) {
    f.type = "bool";
    f.get = [&ref] { return std::string(ref ? "true" : "false"); };
    f.set = [&ref, key](const std::string& t) { ref = parse_bool(key, t); };
  } else if constexpr (std::is_integral_v<X> && std::is_signed_v<X>) {
    f.type = "int";
    f.get = [&ref] { return std::to_string(ref); };
    f.set = [&ref, key](const std::string& t) {
      const int64_t v = parse_int64(key, t);
      if (v < static_cast<int64_t>(std::numeric_limits<X>::min()) ||
          v > static_cast<int64_t>(std::numeric_limits<X>::max())) {
        throw std::invalid_argument(key + ": '" + t + "' is out of range (allowed " +
                                    std::to_string(std::numeric_limits<X>::min()) + ".." +
                                    std::to_string(std::numeric_limits<X>::max()) + ")");
      }
      ref = static_cast<X>(v);
    };
  } else if constexpr (std::is_integral_v<X>) {
    f.type = "int";
    f.get = [&ref] { return std::to_string(ref); };
    f.set = [&ref, key](const std::string& t) {
      const uint64_t v = parse_uint64(key, t);
      if (v > static_cast<uint64_t>(std::numeric_limits<X>::max())) {
        throw std::invalid_argument(key + ": '" + t + "' is out of range (allowed 0.." +
                                    std::to_string(std::numeric_limits<X>::max()) + ")");
      }
      ref = static_cast<X>(v);
    };
  } else if constexpr (std::is_same_v<X, float>) {
    f.type = "float";
    f.get = [&ref] { return format_float(ref); };
    f.set = [&ref, key](const std::string& t) { ref = parse_float(key, t); };
  } else if constexpr (std::is_same_v<X, double>) {
    f.type = "float";
    f.get = [&ref] { return format_double(ref); };
    f.set = [&ref, key](const std::string& t) { ref = parse_double(key, t); };
  } else if constexpr (std::is_enum_v<X>) {
    // An enumeration: to_string(X) and from_string(text, X&) are found by
    // argument-dependent lookup beside the enum (model/optim.h, ...).
    f.type = "string";
    f.get = [&ref] { return to_string(ref); };
    f.set = [&ref](const std::string& t) { from_string(t, ref); };
  } else if constexpr (std::is_same_v<X, std::vector<int>>) {
    f.type = "list";
    f.get = [&ref] { return format_int_list(ref); };
    f.set = [&ref, key](const std::string& t) { ref = parse_int_list(key, t); };
  } else if constexpr (std::is_same_v<X, std::vector<std::string>>) {
    f.type = "list";
    f.get = [&ref] { return format_name_list(ref); };
    f.set = [&ref, key](const std::string& t) { ref = parse_name_list(key, t); };
  } else {
    static_assert(std::is_same_v<X, std::string>, "Fields: unsupported field type");
    f.type = type.empty() ? "string" : type;
    f.get = [&ref] { return ref; };
    f.set = [&ref](const std::string& t) { ref = t; };
  }
  list_.push_back(std::move(f));
}

}  // namespace gpt2
