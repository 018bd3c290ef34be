// The console's streams (console.h). Never blocking rests on two things:
//   * A pipe, FIFO or terminal is written through a descriptor of our own,
//     opened anew from /proc/self/fd/N with O_NONBLOCK: a new open file
//     description, so the flag does not reach the shell's or the launcher's
//     (setting O_NONBLOCK on the inherited descriptor would). A write then
//     takes what fits or fails with EAGAIN, never waits.
//   * Where that open is refused (a socket, no /proc, a pipe of another
//     user's), and for every descriptor besides: a write only after poll()
//     with a zero timeout says the descriptor takes data, at most PIPE_BUF
//     bytes. On Linux a pipe that polls writable has a free page-sized slot,
//     so such a write completes at once (the lock keeps this process's
//     threads from racing for the slot; another process writing into the same
//     pipe could take it between the poll and the write: no launcher we know
//     shares a rank's pipe that way); a regular file always polls writable.
#include "util/console.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <string>

namespace gpt2::console {

namespace {

struct Pending {
  int fd;             // written through: the caller's, or `own`
  int own = -1;       // our non-blocking descriptor of the same pipe or terminal (closed with us)
  std::string text;   // what waits, from `head` on
  size_t head = 0;
  bool gone = false;  // the descriptor failed: later text is dropped at once

  size_t size() const { return text.size() - head; }
};

// A non-blocking descriptor of our own for a pipe, FIFO or terminal `fd`
// (see the file's header), or -1 where there is none to be had.
int own_nonblocking(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))) return -1;
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  return ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
}

uint64_t lines_in(std::string_view text) {
  const auto n = static_cast<uint64_t>(std::count(text.begin(), text.end(), '\n'));
  return std::max<uint64_t>(n, 1);
}

}  // namespace

struct Streams::State {
  mutable std::mutex lock;
  std::array<Pending, 2> streams;
  size_t buffer_bytes;
  uint64_t dropped = 0;

  State(int out_fd, int err_fd, size_t bytes)
      : streams{Pending{out_fd}, Pending{err_fd}}, buffer_bytes(bytes) {
    for (Pending& p : streams) {
      p.own = own_nonblocking(p.fd);
      if (p.own >= 0) p.fd = p.own;
      p.text.reserve(buffer_bytes);  // once: a line queued in a step allocates nothing
    }
  }
  ~State() {
    for (Pending& p : streams) {
      if (p.own >= 0) ::close(p.own);
    }
  }

  void drop_all(Pending& p) {
    if (p.size() > 0) dropped += lines_in(std::string_view(p.text).substr(p.head));
    p.text.clear();
    p.head = 0;
  }

  // Writes one chunk if the descriptor takes it now. Returns the bytes written.
  size_t write_some(Pending& p, short revents) {
    // A pipe whose reader is gone polls POLLERR (writing would raise SIGPIPE),
    // a hung-up terminal POLLHUP, a closed descriptor POLLNVAL.
    if ((revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
      p.gone = true;
      drop_all(p);
      return 0;
    }
    if ((revents & POLLOUT) == 0) return 0;
    // Whole lines a write where they fit: a reader never sees half a line
    // (but of one longer than PIPE_BUF), and another writer's lines fall between ours.
    size_t chunk = std::min<size_t>(p.size(), PIPE_BUF);
    if (chunk < p.size()) {
      const size_t end = std::string_view(p.text).substr(p.head, chunk).rfind('\n');
      if (end != std::string_view::npos) chunk = end + 1;
    }
    const ssize_t n = ::write(p.fd, p.text.data() + p.head, chunk);
    if (n < 0) {
      if (errno != EAGAIN && errno != EINTR) {  // EPIPE (SIGPIPE ignored), EBADF, EIO: the stream is gone
        p.gone = true;
        drop_all(p);
      }
      return 0;
    }
    p.head += static_cast<size_t>(n);
    if (p.head == p.text.size()) {
      p.text.clear();
      p.head = 0;
    } else if (p.head >= buffer_bytes / 2) {  // keep the buffer from creeping: move the rest to the front
      p.text.erase(0, p.head);
      p.head = 0;
    }
    return static_cast<size_t>(n);
  }

  // Writes what the descriptor takes without waiting.
  void flush_now(Pending& p) {
    while (p.size() > 0) {
      pollfd q{p.fd, POLLOUT, 0};
      if (::poll(&q, 1, 0) <= 0) return;
      if (write_some(p, q.revents) == 0) return;
    }
  }
};

Streams::Streams(int out_fd, int err_fd, size_t buffer_bytes)
    : state_(std::make_unique<State>(out_fd, err_fd, buffer_bytes)) {}

Streams::~Streams() = default;

void Streams::say(Stream stream, std::string_view text) {
  if (text.empty()) return;
  State& c = *state_;
  std::lock_guard<std::mutex> hold(c.lock);
  Pending& p = c.streams[stream == Stream::kOut ? 0 : 1];
  c.flush_now(p);  // make room first
  if (p.gone || (p.size() > 0 && p.size() + text.size() > c.buffer_bytes)) {
    c.dropped += lines_in(text);
    return;
  }
  p.text.append(text);
  c.flush_now(p);
}

uint64_t Streams::dropped_lines() const {
  std::lock_guard<std::mutex> hold(state_->lock);
  return state_->dropped;
}

void Streams::drain(std::chrono::milliseconds stall) {
  State& c = *state_;
  std::lock_guard<std::mutex> hold(c.lock);
  using Clock = std::chrono::steady_clock;
  auto give_up = Clock::now() + stall;
  for (;;) {
    std::array<pollfd, 2> q{};
    nfds_t n = 0;
    size_t waiting = 0;
    for (Pending& p : c.streams) {
      if (p.size() == 0) continue;
      q[n++] = pollfd{p.fd, POLLOUT, 0};
      waiting += p.size();
    }
    if (n == 0) return;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - Clock::now()).count();
    if (left <= 0) break;
    // Waits for either to take data, then writes each as flush_now does, with
    // a poll of its own just before: both may be one pipe (2>&1), whose one
    // free slot the first write may have taken.
    if (::poll(q.data(), n, static_cast<int>(left)) < 0 && errno != EINTR) break;
    size_t after = 0;
    for (Pending& p : c.streams) {
      c.flush_now(p);
      after += p.size();
    }
    if (after < waiting) give_up = Clock::now() + stall;  // still taking it: wait on
  }
  for (Pending& p : c.streams) c.drop_all(p);
}

namespace {

// Never destroyed: a thread that says something while the program ends (the
// MPI finalize watchdog) finds it whole.
Streams& the_console() {
  static Streams& c = *new Streams(STDOUT_FILENO, STDERR_FILENO);
  return c;
}

}  // namespace

void say(Stream stream, std::string_view text) { the_console().say(stream, text); }
uint64_t dropped_lines() { return the_console().dropped_lines(); }
void drain(std::chrono::milliseconds stall) { the_console().drain(stall); }

}  // namespace gpt2::console
