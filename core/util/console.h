// The console: a program's progress lines on stdout and stderr, written so
// that they never hold the program up (DESIGN.md, contract 9). A line goes
// into a bounded buffer per stream and is written as far as the stream takes
// it at once; a stream that cannot take more (a stalled launcher, a pipe
// nobody reads) costs lines, not time: a line that does not fit the buffer is
// dropped and counted, and a run names the count in its summary. A stream
// that is gone (a closed pipe, a closed descriptor) drops every later line.
//
// For what a command prints as its result (a plan, a configuration, --help,
// evaluate's JSON) a program writes through stdio as usual: its reader wants
// all of it, and the command has nothing else to do. Mixing the two on one
// stream in one command would reorder them; no command does.
//
// Not for signal handlers (it takes a lock). Thread-safe otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>

namespace gpt2::console {

enum class Stream { kOut, kErr };

// What each stream buffers beyond what its descriptor holds (a pipe: 64 KiB).
inline constexpr size_t kBufferBytes = size_t{64} << 10;

// The stall a program's end allows (drain's argument at exit): a reader that
// takes nothing for this long is taken for stalled.
inline constexpr std::chrono::milliseconds kExitStall{500};

// Two descriptors' lines, never blocking (the process's console is one, on
// descriptors 1 and 2; tests make their own on pipes). Thread-safe.
class Streams {
 public:
  Streams(int out_fd, int err_fd, size_t buffer_bytes = kBufferBytes);
  ~Streams();
  Streams(const Streams&) = delete;
  Streams& operator=(const Streams&) = delete;

  // Queues `text` (usually one line, ending in '\n') for the stream and
  // writes what the stream takes now, without waiting. Text that does not
  // fit beside what is already waiting (the buffer's bytes) is dropped and
  // counted. One text larger than the buffer is taken whole when nothing
  // else waits.
  void say(Stream stream, std::string_view text);
  // Lines dropped so far (a text's '\n's, at least 1 a text), both streams.
  uint64_t dropped_lines() const;
  // Writes what is still waiting, for as long as the descriptors keep taking
  // it, giving up once neither took a byte for `stall`; what is left is then
  // counted as dropped. Returns at once when nothing waits.
  void drain(std::chrono::milliseconds stall);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The process's console, on stdout and stderr.
void say(Stream stream, std::string_view text);
inline void out(std::string_view text) { say(Stream::kOut, text); }
inline void err(std::string_view text) { say(Stream::kErr, text); }
uint64_t dropped_lines();
// Before the program ends (kExitStall).
void drain(std::chrono::milliseconds stall);

}  // namespace gpt2::console
