// Checked arithmetic for every size derived from input (issue 42): shapes,
// counts and bytes read from a configuration key, a command-line option or a
// file header. An overflow is bad input, so it is a std::invalid_argument
// naming what was being computed ("model.n_embd", "llm.c header field C"),
// never a wrapped or negative number that a later allocation or memcpy
// trusts.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gpt2 {

// The error every checked operation throws: "<what>: <detail> overflows
// <limit>" in one line.
[[noreturn]] void throw_size_overflow(std::string_view what, std::string_view detail, std::string_view limit);

// a * b, a + b for sizes; throws (naming `what`) when the result passes `max`.
uint64_t checked_mul(uint64_t a, uint64_t b, std::string_view what,
                     uint64_t max = std::numeric_limits<uint64_t>::max());
uint64_t checked_add(uint64_t a, uint64_t b, std::string_view what,
                     uint64_t max = std::numeric_limits<uint64_t>::max());
// The product of `factors` (each >= 0), checked against `max`.
uint64_t checked_product(std::initializer_list<uint64_t> factors, std::string_view what,
                         uint64_t max = std::numeric_limits<uint64_t>::max());

// The largest element count a size may take so that its bytes, as 64-bit
// signed offsets (file positions, ptrdiff_t, int64 shapes), never wrap.
inline constexpr uint64_t kMaxSignedBytes = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// `v` as an int, or the one-line refusal naming `what`.
int checked_int(uint64_t v, std::string_view what);

}  // namespace gpt2
