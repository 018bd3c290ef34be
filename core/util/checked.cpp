#include "util/checked.h"

#include <fmt/format.h>

namespace gpt2 {

void throw_size_overflow(std::string_view what, std::string_view detail, std::string_view limit) {
  throw std::invalid_argument(fmt::format("{}: {} overflows {}", what, detail, limit));
}

namespace {
std::string limit_text(uint64_t max) {
  return max == std::numeric_limits<uint64_t>::max() ? std::string("64 bits") : fmt::format("{}", max);
}
}  // namespace

uint64_t checked_mul(uint64_t a, uint64_t b, std::string_view what, uint64_t max) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r) || r > max) {
    throw_size_overflow(what, fmt::format("{} x {}", a, b), limit_text(max));
  }
  return r;
}

uint64_t checked_add(uint64_t a, uint64_t b, std::string_view what, uint64_t max) {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r) || r > max) {
    throw_size_overflow(what, fmt::format("{} + {}", a, b), limit_text(max));
  }
  return r;
}

uint64_t checked_product(std::initializer_list<uint64_t> factors, std::string_view what, uint64_t max) {
  for (const uint64_t f : factors) {
    if (f == 0) return 0;  // whatever the others are
  }
  uint64_t r = 1;
  bool overflow = false;
  for (const uint64_t f : factors) overflow = overflow || __builtin_mul_overflow(r, f, &r) || r > max;
  if (overflow) {
    std::string shown;
    for (const uint64_t f : factors) shown += fmt::format("{}{}", shown.empty() ? "" : " x ", f);
    throw_size_overflow(what, shown, limit_text(max));
  }
  return r;
}

int checked_int(uint64_t v, std::string_view what) {
  if (v > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
    throw_size_overflow(what, fmt::format("{}", v), "a 32-bit int");
  }
  return static_cast<int>(v);
}

}  // namespace gpt2
