// JSON for the whole code base, through one library (nlohmann/json, Debian's
// nlohmann-json3-dev): records, reports, benchmark outputs. Objects keep the
// order their keys were written in, so files stay readable and diffable.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace gpt2 {

using Json = nlohmann::ordered_json;

// x rounded to `digits` significant decimal digits (as printf's %.{digits}g),
// so that a value written to JSON carries the precision it is meaningful to,
// not the 17 digits of its binary double.
double round_sig(double x, int digits);
// x rounded to `decimals` digits after the point (as printf's %.{decimals}f).
double round_fixed(double x, int decimals);

// The JSON text of j (`indent` as nlohmann's dump: -1 for one line). Strings
// that are not valid UTF-8 (generated text cut inside a multi-byte character,
// a corpus in another encoding) are written with U+FFFD in place of the bad
// bytes instead of throwing: a record is never lost to its text.
std::string json_text(const Json& j, int indent = -1);

// obj[key] as text: a string as it is, a number or a flag as JSON writes it;
// `missing` where obj has no such key or it is null.
std::string field_text(const Json& obj, const std::string& key, const std::string& missing = "");

// How deeply a JSON text read from a file may nest arrays and objects. The
// parser keeps its own stack, but writing a value back (dump(), json_text(),
// an error message quoting it), comparing and copying recurse once a level:
// 100000 levels of [[[[...]]]] overflow the stack. No file of ours nests
// deeper than a few levels.
inline constexpr size_t kMaxJsonDepth = 512;

// The deepest nesting of arrays and objects in a JSON text (brackets inside
// strings not counted), counted no further than `stop_above` + 1: linear in
// the text, allocates nothing, for checking a text before it is parsed.
size_t json_nesting(std::string_view text, size_t stop_above = kMaxJsonDepth);

// Parses one JSON text; throws std::runtime_error naming `where` (a file and
// line, say) and the parser's message (quoting at most a short excerpt of
// the text), or that the text nests deeper than kMaxJsonDepth.
Json parse_json(const std::string& text, const std::string& where);

}  // namespace gpt2
