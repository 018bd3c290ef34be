#include "util/json.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "util/text.h"

namespace gpt2 {

double round_sig(double x, int digits) {
  if (!std::isfinite(x)) return x;
  return std::strtod(fmt::format("{:.{}g}", x, digits).c_str(), nullptr);
}

double round_fixed(double x, int decimals) {
  if (!std::isfinite(x)) return x;
  return std::strtod(fmt::format("{:.{}f}", x, decimals).c_str(), nullptr);
}

std::string json_text(const Json& j, int indent) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

std::string field_text(const Json& obj, const std::string& key, const std::string& missing) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return missing;
  return it->is_string() ? it->get<std::string>() : json_text(*it);
}

size_t json_nesting(std::string_view text, size_t stop_above) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, a quote included
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > stop_above) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

Json parse_json(const std::string& text, const std::string& where) {
  if (json_nesting(text) > kMaxJsonDepth) {
    throw std::runtime_error(fmt::format("{}: not valid JSON here: arrays and objects nested deeper than {} levels",
                                         where, kMaxJsonDepth));
  }
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    // nlohmann's message ends with the token last read, which can be the
    // whole of a 10 MB string: quoted short, bytes escaped.
    throw std::runtime_error(fmt::format("{}: not valid JSON: {}", where, excerpt(e.what(), 200)));
  }
}

}  // namespace gpt2
