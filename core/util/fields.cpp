#include "util/fields.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>

#include "util/text.h"

namespace gpt2 {

namespace {

template <typename X>
std::string out_of_range(const std::string& key, const std::string& text, X lowest, X highest) {
  return fmt::format("{}: '{}' is out of range (allowed {}..{})", key, excerpt(text), lowest, highest);
}

template <typename X>
X parse_number(const std::string& key, const std::string& text, const char* expected) {
  X v{};
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (!text.empty() && text[0] == '+') ++first;  // from_chars takes no '+'
  const bool second_sign = first != text.data() && first != last && (*first == '-' || *first == '+');
  auto [end, ec] = std::from_chars(first, last, v);
  if (!text.empty() && !second_sign && ec == std::errc::result_out_of_range && end == last) {
    // Well-formed but too large: say so, rather than "expected an integer".
    throw std::invalid_argument(out_of_range(key, text, std::numeric_limits<X>::lowest(), std::numeric_limits<X>::max()));
  }
  if (text.empty() || second_sign || ec != std::errc() || end != last) {
    throw std::invalid_argument(fmt::format("{}: expected {}, got '{}'", key, expected, excerpt(text)));
  }
  return v;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string section_of(const std::string& key) {
  const size_t dot = key.find('.');
  return dot == std::string::npos ? "" : key.substr(0, dot);
}

std::string name_of(const std::string& key) { return key.substr(key.find('.') + 1); }

// A YAML double-quoted scalar (JSON's escapes are valid YAML).
std::string yaml_quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) out += fmt::format("\\x{:02x}", c);
        else out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

bool parse_bool(const std::string& key, const std::string& text) {
  if (text == "true") return true;
  if (text == "false") return false;
  throw std::invalid_argument(fmt::format("{}: expected true or false, got '{}'", key, excerpt(text)));
}

int64_t parse_int64(const std::string& key, const std::string& text) {
  return parse_number<int64_t>(key, text, "an integer");
}

uint64_t parse_uint64(const std::string& key, const std::string& text) {
  if (!text.empty() && text[0] == '-') {
    throw std::invalid_argument(fmt::format("{}: expected a non-negative integer, got '{}'", key, excerpt(text)));
  }
  return parse_number<uint64_t>(key, text, "a non-negative integer");
}

double parse_double(const std::string& key, const std::string& text) {
  const double v = parse_number<double>(key, text, "a number");
  if (!std::isfinite(v)) throw std::invalid_argument(fmt::format("{}: expected a number, got '{}'", key, excerpt(text)));
  return v;
}

float parse_float(const std::string& key, const std::string& text) {
  const float v = parse_number<float>(key, text, "a number");
  if (!std::isfinite(v)) throw std::invalid_argument(fmt::format("{}: expected a number, got '{}'", key, excerpt(text)));
  return v;
}

std::vector<int> parse_int_list(const std::string& key, const std::string& text) {
  // Every error quotes the whole list, not the item that failed.
  const auto bad = [&] {
    return std::invalid_argument(fmt::format("{}: expected a comma-separated list of integers, got '{}'", key, excerpt(text)));
  };
  if (text.empty() || text.back() == ',') throw bad();  // getline would drop an empty last item
  std::vector<int> out;
  std::stringstream ss(text);
  for (std::string part; std::getline(ss, part, ',');) {
    try {
      out.push_back(parse_number<int>(key, part, "an integer"));
    } catch (const std::invalid_argument&) {
      throw bad();
    }
  }
  return out;
}

std::vector<std::string> parse_name_list(const std::string& key, const std::string& text) {
  std::vector<std::string> out;
  if (text.find_first_not_of(" \t") == std::string::npos) return out;
  std::stringstream ss(text + ",");  // getline drops an empty last item: the extra comma keeps it
  for (std::string part; std::getline(ss, part, ',');) {
    const size_t a = part.find_first_not_of(" \t"), b = part.find_last_not_of(" \t");
    if (a == std::string::npos) {
      throw std::invalid_argument(fmt::format("{}: expected a comma-separated list of names, got '{}' (an empty item)",
                                              key, excerpt(text)));
    }
    out.push_back(part.substr(a, b - a + 1));
  }
  return out;
}

std::string format_float(float x) { return fmt::format("{}", x); }
std::string format_double(double x) { return fmt::format("{}", x); }

std::string format_int_list(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(v[i]);
  }
  return out;
}

std::string format_name_list(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    out += v[i];
  }
  return out;
}

const Field* Fields::find(const std::string& key) const {
  for (const Field& f : list_) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

std::vector<std::string> Fields::keys() const {
  std::vector<std::string> out;
  for (const Field& f : list_) out.push_back(f.key);
  return out;
}

std::vector<std::string> Fields::sections() const {
  std::vector<std::string> out;
  for (const Field& f : list_) {
    const std::string s = section_of(f.key);
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

bool Fields::is_flag(const std::string& key) const {
  const Field* f = find(key);
  return f && f->type == "bool";
}

void Fields::retire(const std::string& key_or_section, const std::string& why,
                    std::vector<std::pair<std::string, double>> inert) {
  retired_.push_back({key_or_section, why, std::move(inert)});
}

const std::string* Fields::retired(const std::string& key) const {
  for (const Retired& r : retired_) {
    if (key == r.key || (r.key.ends_with('.') && key.starts_with(r.key))) return &r.why;
  }
  return nullptr;
}

void Fields::set(const std::string& key, const std::string& text, const std::string& where) const {
  if (const std::string* why = retired(key)) {
    for (const Retired& r : retired_) {
      for (const auto& [k, value] : r.inert) {
        size_t used = 0;
        double x = 0;
        try {
          x = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (k == key && used == text.size() && used > 0 && x == value) return;  // its old default: no effect
      }
    }
    throw std::invalid_argument(fmt::format("{}: '{}' is no longer a setting: {}", where, excerpt(key), *why));
  }
  if (const Field* f = find(key)) {
    try {
      f->set(text);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("{}: {}", where, e.what()));
    }
    return;
  }
  const std::string hint = closest_key(key, keys());
  throw std::invalid_argument(fmt::format("{}: unknown key '{}'{}", where, excerpt(key),
                                          hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
}

std::string Fields::help(const std::vector<std::string>& sections) const {
  std::string out;
  for (const Field& f : list_) {
    if (!sections.empty() && std::find(sections.begin(), sections.end(), section_of(f.key)) == sections.end()) {
      continue;
    }
    std::string def = f.get();
    if (def.empty()) def = "(none)";
    out += fmt::format("  --{:<24} {} [{}: {}]\n", f.key + (f.type == "bool" && section_of(f.key).empty() ? "" : " V"),
                       f.help, f.type, def);
  }
  return out;
}

std::string Fields::to_yaml() const {
  std::string out, section;
  for (const Field& f : list_) {
    if (section_of(f.key) != section) {
      section = section_of(f.key);
      out += section + ":\n";
    }
    std::string v = f.get();
    if (f.type == "string" || f.type == "path") v = yaml_quoted(v);
    out += fmt::format("{}{}: {}\n", section.empty() ? "" : "  ", name_of(f.key), v);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> Fields::values() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Field& f : list_) out.emplace_back(f.key, f.get());
  return out;
}

std::string closest_key(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = std::max<size_t>(3, key.size() / 3) + 1;
  for (const std::string& k : known) {
    const std::string name = name_of(k);
    const bool same_name = key == name || name_of(key) == name;
    // The lengths' difference bounds the distance from below: a 10 MB key is
    // not compared letter by letter with every known one.
    const size_t length_gap = key.size() > k.size() ? key.size() - k.size() : k.size() - key.size();
    if (!same_name && length_gap >= best_d) continue;
    size_t d = same_name ? (key == k ? 0 : 1) : edit_distance(key, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return best;
}

CommandLine parse_command_line(const std::vector<std::string>& args, const Fields& fields,
                               const std::vector<std::string>& extra_keys,
                               const std::vector<std::string>& extra_flags) {
  CommandLine cl;
  auto listed = [](const std::vector<std::string>& v, const std::string& k) {
    return std::find(v.begin(), v.end(), k) != v.end();
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      cl.help = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) {
      cl.positional.push_back(a);
      continue;
    }
    std::string key = a.substr(2), value;
    const size_t eq = key.find('=');
    const bool has_value = eq != std::string::npos;
    if (has_value) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    }
    if (listed(extra_flags, key)) {
      if (has_value) throw std::invalid_argument(fmt::format("--{} takes no value", key));
      cl.other.emplace_back(key, "");
      continue;
    }
    if (const std::string* why = fields.retired(key)) {
      throw std::invalid_argument(fmt::format("command line: '--{}' is no longer a setting: {}", excerpt(key), *why));
    }
    const bool known = listed(extra_keys, key) || fields.find(key) != nullptr;
    if (!known && key.find('.') != std::string::npos) {  // a configuration key (section.name)
      const std::string hint = closest_key(key, fields.keys());
      throw std::invalid_argument(fmt::format("command line: unknown key '{}'{}", excerpt(key),
                                              hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
    }
    if (!known) {
      std::vector<std::string> all = fields.keys();
      all.insert(all.end(), extra_keys.begin(), extra_keys.end());
      all.insert(all.end(), extra_flags.begin(), extra_flags.end());
      const std::string hint = closest_key(key, all);
      throw std::invalid_argument(fmt::format("unknown option '--{}'{}", excerpt(key),
                                              hint.empty() ? "" : fmt::format(" (did you mean '--{}'?)", hint)));
    }
    if (!has_value) {
      // A bare bool option of a tool is "true"; a configuration key (section.name) always takes a value.
      if (fields.is_flag(key) && section_of(key).empty()) {
        value = "true";
      } else {
        if (i + 1 >= args.size()) throw std::invalid_argument(fmt::format("--{}: missing value", key));
        // `--out --overwrite` forgot the value: taking the next option as it
        // would train into a directory named "--overwrite". A value that
        // starts with "-" alone (a negative number) is still a value.
        if (args[i + 1].rfind("--", 0) == 0) {
          throw std::invalid_argument(fmt::format("--{}: missing value (got the option '{}')", key, excerpt(args[i + 1])));
        }
        value = args[++i];
      }
    }
    if (listed(extra_keys, key)) {
      cl.other.emplace_back(key, value);
    } else {
      cl.settings.emplace_back(key, value);
    }
  }
  return cl;
}

const std::string* CommandLine::find(const std::string& key) const {
  const std::string* found = nullptr;
  for (const auto& [k, v] : other) {
    if (k == key) found = &v;  // the last one given wins
  }
  return found;
}

void apply_settings(const Fields& fields, const CommandLine& cl) {
  for (const auto& [key, value] : cl.settings) {
    const Field* f = fields.find(key);
    try {
      f->set(value);
    } catch (const std::invalid_argument& e) {
      // The parse error starts with the key: "--threads: expected ..." for a
      // tool's option, "command line: train.steps: expected ..." for a
      // configuration key.
      throw std::invalid_argument(section_of(key).empty() ? fmt::format("--{}", e.what())
                                                          : fmt::format("command line: {}", e.what()));
    }
  }
}

}  // namespace gpt2
