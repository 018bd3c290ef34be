// Quoting input in messages (issue 42): an error names the bad value, but a
// value is the user's bytes, of any length and any content (a 10 MB line, a
// deeply nested JSON value, binary). excerpt() is what every message quotes:
// at most `max_chars` characters of it, printable ASCII as is and every other
// byte escaped (\n, \t, \xNN), with the full length named when it is cut.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gpt2 {

inline constexpr size_t kExcerptChars = 80;

// "abc", "a\x00b", or "first 80 characters... (10485760 bytes)".
std::string excerpt(std::string_view text, size_t max_chars = kExcerptChars);

}  // namespace gpt2
