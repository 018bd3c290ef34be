#include "util/text.h"

#include <fmt/format.h>

namespace gpt2 {

std::string excerpt(std::string_view text, size_t max_chars) {
  std::string out;
  size_t i = 0;
  for (; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::string piece;
    if (c == '\n') {
      piece = "\\n";
    } else if (c == '\t') {
      piece = "\\t";
    } else if (c == '\r') {
      piece = "\\r";
    } else if (c == '\\') {
      piece = "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      piece = std::string(1, static_cast<char>(c));
    } else {
      piece = fmt::format("\\x{:02x}", c);
    }
    if (out.size() + piece.size() > max_chars) break;
    out += piece;
  }
  if (i < text.size()) out += fmt::format("... ({} bytes)", text.size());
  return out;
}

}  // namespace gpt2
