#include "train/config/threads.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <thread>

namespace gpt2 {

int max_threads() {
  const unsigned cores = std::min(std::thread::hardware_concurrency(), 1u << 20);  // 0: unknown
  return std::max(64, 4 * static_cast<int>(cores));
}

int check_threads(int threads, const char* what) {
  if (threads > max_threads()) {
    throw std::invalid_argument(fmt::format("{}: {} threads is above the limit of {} (4 x the {} cores this machine "
                                            "reports, at least 64)", what, threads, max_threads(),
                                            std::thread::hardware_concurrency()));
  }
  return threads;
}

int resolve_threads(int threads) {
  check_threads(threads, "train.threads");
  return threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace gpt2
