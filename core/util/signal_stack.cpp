#include "util/signal_stack.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace gpt2 {

namespace {

// One thread's alternate stack: installed when made, removed before its
// memory is freed (at the thread's end). A stack some other code installed
// first is left as it is.
class AltStack {
 public:
  AltStack() {
    stack_t now{};
    if (sigaltstack(nullptr, &now) == 0 && (now.ss_flags & SS_DISABLE) == 0) return;  // the thread has one
    const long min = sysconf(_SC_SIGSTKSZ);  // glibc's dynamic size: the signal frame of this CPU's registers
    size_ = static_cast<size_t>(min > 0 ? min : 0) + 64 * 1024;
    memory_ = std::make_unique<char[]>(size_);
    stack_t ss{};
    ss.ss_sp = memory_.get();
    ss.ss_size = size_;
    if (sigaltstack(&ss, nullptr) != 0) {
      throw std::runtime_error(fmt::format("sigaltstack: {}", std::strerror(errno)));
    }
  }
  ~AltStack() {
    if (!memory_) return;
    stack_t now{};
    if (sigaltstack(nullptr, &now) == 0 && now.ss_sp == memory_.get()) {
      stack_t off{};
      off.ss_flags = SS_DISABLE;
      sigaltstack(&off, nullptr);
    }
  }
  AltStack(const AltStack&) = delete;
  AltStack& operator=(const AltStack&) = delete;

 private:
  std::unique_ptr<char[]> memory_;
  size_t size_ = 0;
};

}  // namespace

void ensure_signal_stack() { thread_local const AltStack stack; }

void install_signal_handler(int sig, void (*handler)(int)) {
  ensure_signal_stack();
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_ONSTACK;
  if (sigaction(sig, &sa, nullptr) != 0) {
    throw std::runtime_error(fmt::format("sigaction({}): {}", sig, std::strerror(errno)));
  }
}

}  // namespace gpt2
