#include "train/run/test_hooks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <stdexcept>
#include <vector>

namespace gpt2 {

namespace {

// `value` as a number in [lo, hi], or the refusal naming the entry.
double number(const std::string& key, const std::string& value, double lo, double hi) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size() || !std::isfinite(x) || x < lo || x > hi) {
    throw std::invalid_argument(fmt::format("{}: {}={}: expected a number from {} to {}", kTestHooksVariable, key,
                                            value, lo, hi));
  }
  return x;
}

int64_t whole(const std::string& key, const std::string& value, double lo, double hi) {
  const double x = number(key, value, lo, hi);
  if (x != std::floor(x)) {
    throw std::invalid_argument(fmt::format("{}: {}={}: expected a whole number", kTestHooksVariable, key, value));
  }
  return static_cast<int64_t>(x);
}

}  // namespace

bool TestHooks::any() const { return !describe().empty(); }

std::string TestHooks::describe() const {
  const TestHooks d;
  std::vector<std::string> parts;
  if (fail_rank != d.fail_rank) parts.push_back(fmt::format("fail_rank={}", fail_rank));
  if (fail_step != d.fail_step) parts.push_back(fmt::format("fail_step={}", fail_step));
  if (long_step_s != d.long_step_s) parts.push_back(fmt::format("long_step_s={}", long_step_s));
  if (checkpoint_delay_s != d.checkpoint_delay_s) parts.push_back(fmt::format("checkpoint_delay_s={}", checkpoint_delay_s));
  if (step_sleep_s != d.step_sleep_s) parts.push_back(fmt::format("step_sleep_s={}", step_sleep_s));
  return fmt::format("{}", fmt::join(parts, ","));
}

TestHooks parse_test_hooks(const std::string& text) {
  TestHooks h;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string entry = text.substr(at, end - at);
    at = end + 1;
    if (entry.empty()) continue;
    const size_t eq = entry.find('=');
    const std::string key = entry.substr(0, eq), value = eq == std::string::npos ? "" : entry.substr(eq + 1);
    if (key == "fail_rank") {
      h.fail_rank = static_cast<int>(whole(key, value, -1, 1 << 30));
    } else if (key == "fail_step") {
      h.fail_step = whole(key, value, -1, 1e15);
    } else if (key == "long_step_s") {
      h.long_step_s = number(key, value, 0, 1e9);
    } else if (key == "checkpoint_delay_s") {
      h.checkpoint_delay_s = number(key, value, 0, 3600);
    } else if (key == "step_sleep_s") {
      h.step_sleep_s = number(key, value, 0, 3600);
    } else {
      throw std::invalid_argument(fmt::format("{}: unknown hook '{}' (expected fail_rank, fail_step, long_step_s, "
                                              "checkpoint_delay_s or step_sleep_s, as key=value separated by commas)",
                                              kTestHooksVariable, key));
    }
  }
  return h;
}

}  // namespace gpt2
