// The names of a closed choice (an enum class parsed from a settings key):
// one table per enum gives its values' names in declaration order and the
// key it is read from, and these two functions read and write it. The
// settings sections (model/config.h, train/config/run_config.h) define their
// enums' to_string / from_string with them, which util/fields.h finds for
// the field list (YAML, the command line, config.yaml, checkpoint headers).
//
//   template <> struct EnumNames<Precision> {
//     static constexpr const char* names[] = {"fp32", "bf16"};
//     static constexpr const char* key = "train.precision";
//   };
#pragma once

#include <stdexcept>
#include <string>

namespace gpt2 {

template <typename E>
struct EnumNames;

// The name of `v`.
template <typename E>
std::string enum_name(E v) {
  return EnumNames<E>::names[static_cast<int>(v)];
}

// `text` as a value of E; throws std::invalid_argument naming the key, the
// text and every name ("train.precision: unknown value 'fp16' (expected fp32 | bf16)").
template <typename E>
void parse_enum(const std::string& text, E& out) {
  std::string known;
  int i = 0;
  for (const char* n : EnumNames<E>::names) {
    if (text == n) {
      out = static_cast<E>(i);
      return;
    }
    known += (known.empty() ? "" : " | ") + std::string(n);
    ++i;
  }
  throw std::invalid_argument(std::string(EnumNames<E>::key) + ": unknown value '" + text + "' (expected " + known +
                              ")");
}

}  // namespace gpt2
