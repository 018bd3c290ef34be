#include "util/json.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <stdexcept>

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

Json parse_json(const std::string& text, const std::string& where) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw std::runtime_error(fmt::format("{}: not valid JSON: {}", where, e.what()));
  }
}

}  // namespace gpt2
