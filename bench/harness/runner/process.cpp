// Starting programs and reading their logs (see process.h).
#include "runner/process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

// The process group of the program in flight, for the signal handler: a
// harness interrupted by Ctrl-C or SIGTERM ends its run (mpiexec and every
// rank) too.
volatile sig_atomic_t g_child_group = 0;

// How long a program has to end after SIGTERM before SIGKILL.
constexpr double kGraceSeconds = 3.0;

extern "C" void forward_and_exit(int sig) {
  if (g_child_group > 0) kill(-g_child_group, SIGTERM);
  signal(sig, SIG_DFL);
  raise(sig);
}

// The launches of this process, for their tags.
int g_launches = 0;

// The processes other than this one whose environment holds `entry`
// ("NAME=value") exactly, with their command lines.
std::vector<std::pair<pid_t, std::string>> tagged_processes(const std::string& entry) {
  std::vector<std::pair<pid_t, std::string>> found;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return found;
  const auto read_all = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  while (const dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == getpid()) continue;
    const std::string env = read_all(fmt::format("/proc/{}/environ", pid));  // empty for a zombie
    bool tagged = false;
    for (size_t at = 0; at < env.size() && !tagged;) {
      const size_t next = env.find('\0', at);
      tagged = env.compare(at, (next == std::string::npos ? env.size() : next) - at, entry) == 0;
      at = next == std::string::npos ? env.size() : next + 1;
    }
    if (!tagged) continue;
    std::string cmd = read_all(fmt::format("/proc/{}/cmdline", pid));
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    found.emplace_back(static_cast<pid_t>(pid), cmd.substr(0, 120));
  }
  closedir(proc);
  return found;
}

// Ends every process tagged `entry`: SIGTERM, up to `grace_s` to go, then
// SIGKILL. Returns those that were alive at first.
std::vector<std::pair<pid_t, std::string>> end_tagged(const std::string& entry, double grace_s) {
  const auto first = tagged_processes(entry);
  for (const auto& [pid, cmd] : first) kill(pid, SIGTERM);
  const auto t0 = std::chrono::steady_clock::now();
  for (auto left = first; !left.empty(); left = tagged_processes(entry)) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > grace_s) {
      for (const auto& [pid, cmd] : left) kill(pid, SIGKILL);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return first;
}

// The guardian of one launch: a process of its own group (the harness puts
// it there before starting the program, so a signal to the harness's group
// does not reach it) that holds one end of a socket pair whose other end only
// the harness holds. A 'd' on it means the harness ended the run itself; end
// of file without it means the harness died (SIGKILL included), and the
// guardian ends every process of the run, then runs `then` (if set).
[[noreturn]] void guard(int read_fd, const std::string& entry, const std::function<void()>& then) {
  setpgid(0, 0);  // the parent did so too (no window); either is enough
  signal(SIGINT, SIG_DFL);  // not the harness's forwarding handlers
  signal(SIGTERM, SIG_DFL);
  const int moved = fcntl(read_fd, F_DUPFD, 10);  // out of 0-2's way, should the harness have started without them
  if (moved >= 0) read_fd = moved;
  const int null_fd = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3 && null_fd >= 0; ++fd) dup2(null_fd, fd);
  // Nothing else of the harness's (a results folder's lock above all) stays open here.
  dup2(read_fd, 3);
  read_fd = 3;
  close_range(4, ~0U, 0);
  char c = 0;
  ssize_t n;
  while ((n = ::read(read_fd, &c, 1)) < 0 && errno == EINTR) {
  }
  if (n != 1 || c != 'd') {
    end_tagged(entry, kGraceSeconds);
    if (then) {
      try {
        then();
      } catch (const std::exception&) {
        // Nobody is left to tell.
      }
    }
  }
  std::_Exit(0);
}

// argv as the char* array execvp wants; the strings must outlive it.
std::vector<char*> c_args(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  return args;
}

// In the child after fork: becomes the program, or says why not on its stderr.
[[noreturn]] void exec_child(std::vector<char*>& args) {
  signal(SIGPIPE, SIG_DFL);  // the harness ignores it (main.cpp); a program starts as from a shell
  execvp(args[0], args.data());
  std::fprintf(stderr, "harness: error: cannot start %s\n", args[0]);
  std::_Exit(127);
}

// Opens the run's log for the program's output: appended to after the
// command line, or written afresh.
int open_log(const fs::path& log, const std::vector<std::string>& argv, bool append) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
  if (fd < 0) throw std::runtime_error(fmt::format("{}: cannot write the log: {}", log.string(), std::strerror(errno)));
  if (append) {
    const std::string line = "$ " + command_text(argv) + "\n";
    if (::write(fd, line.data(), line.size()) < 0) {
      throw std::runtime_error(fmt::format("{}: cannot write the log", log.string()));
    }
  }
  return fd;
}

// A launch's guardian (guard) as the harness holds it: its process and the
// harness's end of their socket pair.
struct Guardian {
  pid_t pid = -1;
  int fd = -1;
};

// Starts the guardian of the run tagged `tag` (`log_fd`: the harness's log,
// which the guardian does not keep), in a group of its own.
Guardian start_guardian(int log_fd, const std::string& tag, const std::function<void()>& if_harness_dies) {
  // A socket pair, not a pipe: the harness's 'd' is sent with MSG_NOSIGNAL,
  // so a guardian that died meanwhile costs no SIGPIPE.
  int guard_pipe[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, guard_pipe) != 0) {
    throw std::runtime_error(fmt::format("socketpair failed: {}", std::strerror(errno)));
  }
  const pid_t guardian = fork();  // first: from here on, a harness that dies leaves nothing of the run behind
  if (guardian < 0) throw std::runtime_error("fork failed");
  if (guardian == 0) {
    ::close(guard_pipe[1]);
    ::close(log_fd);
    guard(guard_pipe[0], tag, if_harness_dies);
  }
  setpgid(guardian, guardian);  // out of the harness's group before the program exists
  ::close(guard_pipe[0]);
  return {guardian, guard_pipe[1]};
}

// Tells the guardian the harness ended the run, and waits for it.
void release_guardian(const Guardian& g) {
  while (::send(g.fd, "d", 1, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
  ::close(g.fd);
  while (waitpid(g.pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

// In the program's child after fork: its own group, the log as its output,
// the environment `opt` asks for and the run's tag, then the program.
[[noreturn]] void start_program(pid_t harness, int log_fd, const LaunchOptions& opt, const std::string& tag_value,
                                std::vector<char*>& args) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);  // the harness killed outright (SIGKILL): end the program too
  if (getppid() != harness) std::_Exit(127);  // it died before the line above
  const int null_fd = ::open("/dev/null", O_RDONLY);  // nothing the harness starts reads its input
  if (null_fd >= 0) dup2(null_fd, 0);
  dup2(log_fd, 1);
  dup2(log_fd, 2);
  // The harness is single-threaded, so changing the environment here is safe.
  for (const auto& [k, v] : opt.env) setenv(k.c_str(), v.c_str(), 1);
  for (const std::string& k : opt.unset_env) unsetenv(k.c_str());
  setenv(kRunTagVariable, tag_value.c_str(), 1);
  if (!opt.cwd.empty() && chdir(opt.cwd.c_str()) != 0) std::_Exit(127);
  exec_child(args);
}

// However the run ends, nothing of it stays: what is left of the run tagged
// `tag` is ended (and, unless it timed out, named in its log), the log
// closed, the guardian told so and waited for.
void finish_run(const std::string& tag, int log_fd, const Guardian& g, bool timed_out) {
  const auto left = end_tagged(tag, kGraceSeconds);
  if (!left.empty() && !timed_out) {  // the program ended and left processes behind: say so in its log
    std::string note = fmt::format("harness: {} process(es) of this run were still alive after it ended; ended "
                                   "them:\n", left.size());
    for (const auto& [p, cmd] : left) note += fmt::format("harness:   pid {}: {}\n", p, cmd);
    ::lseek(log_fd, 0, SEEK_END);
    if (::write(log_fd, note.data(), note.size()) < 0) {
      // The note is a courtesy: the processes are ended whether or not it is written.
    }
  }
  ::close(log_fd);
  release_guardian(g);
  g_child_group = 0;
}

}  // namespace

std::string command_text(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    // Characters listed as plain, not special ones listed as quoted: a character missed is quoted for nothing.
    const std::string_view plain_chars = out.empty() ? "_-./:,+@" : "_-./:,+@=";
    const bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [&](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || plain_chars.find(c) != std::string_view::npos;
    });
    if (!out.empty()) out += ' ';
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';  // single quotes keep everything but a single quote, written as '\''
    for (char ch : a) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    out += '\'';
  }
  return out;
}

int launch(const std::vector<std::string>& argv, const fs::path& log, const LaunchOptions& opt) {
  signal(SIGINT, forward_and_exit);
  signal(SIGTERM, forward_and_exit);
  const int fd = open_log(log, argv, opt.append_log);
  std::vector<char*> args = c_args(argv);
  // Every process of this run carries the tag, mpiexec's proxies and ranks
  // too: Hydra passes the environment on but starts each proxy and rank in a
  // session of its own, so no process group holds the whole run.
  const std::string tag_value = fmt::format("{}.{}", getpid(), ++g_launches);
  const std::string tag = fmt::format("{}={}", kRunTagVariable, tag_value);
  const Guardian guardian = start_guardian(fd, tag, opt.if_harness_dies);
  const pid_t harness = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    release_guardian(guardian);
    ::close(fd);
    throw std::runtime_error("fork failed");
  }
  if (pid == 0) start_program(harness, fd, opt, tag_value, args);
  setpgid(pid, pid);
  g_child_group = pid;
  // A failure while waiting (a progress callback that throws) ends the run like a timeout.
  const auto abandon = [&] {
    kill(-pid, SIGTERM);
    finish_run(tag, fd, guardian, true);
    kill(-pid, SIGKILL);
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto next_tick = t0 + std::chrono::milliseconds(500);
  int status = 0;
  for (;;) {
    if (opt.on_tick && std::chrono::steady_clock::now() >= next_tick) {
      try {
        opt.on_tick();
      } catch (...) {
        abandon();
        throw;
      }
      next_tick += std::chrono::milliseconds(500);
    }
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      abandon();
      throw std::runtime_error(fmt::format("waiting for {}: {}", argv[0], std::strerror(errno)));
    }
    if (opt.timeout_s > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > opt.timeout_s) {
      abandon();  // the program (tagged) and all of its processes, SIGKILL after the grace
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  finish_run(tag, fd, guardian, false);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

Captured capture(const std::vector<std::string>& argv) {
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) throw std::runtime_error("pipe failed");
  std::vector<char*> args = c_args(argv);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    exec_child(args);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  // Both pipes are drained together: a child blocked on a full stderr pipe
  // while we wait on stdout would never finish.
  Captured c;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&c.out, &c.err};
  int open_fds = 2;
  char buf[4096];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fds[k].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[k]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[k].fd);
        fds[k].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  c.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return c;
}

namespace {

// The last line of a log that `wanted` accepts, or "".
template <typename Pred>
std::string last_line_where(const fs::path& log, Pred wanted) {
  std::ifstream f(log);
  std::string last;
  for (std::string l; std::getline(f, l);) {
    if (wanted(l)) last = l;
  }
  return last;
}

}  // namespace

std::string error_from_log(const fs::path& log) {
  return last_line_where(log, [](const std::string& l) { return l.find("error:") != std::string::npos; });
}

std::string last_line_of(const fs::path& log) {
  return last_line_where(log, [](const std::string& l) { return l.find_first_not_of(" \t\r") != std::string::npos; });
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  for (std::string dir; std::getline(ss, dir, ':');) {
    const fs::path p = fs::path(dir.empty() ? "." : dir) / name;  // an empty entry is the current folder
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

}  // namespace gpt2::harness
