// Starting programs and reading their logs (see process.h).
#include "runner/process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

// The process group of the program in flight, for the signal handler: a
// harness interrupted by Ctrl-C or SIGTERM ends its run (mpiexec and every
// rank) too.
volatile sig_atomic_t g_child_group = 0;

extern "C" void forward_and_exit(int sig) {
  if (g_child_group > 0) kill(-g_child_group, SIGTERM);
  signal(sig, SIG_DFL);
  raise(sig);
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
  execvp(args[0], args.data());
  std::fprintf(stderr, "harness: error: cannot start %s\n", args[0]);
  std::_Exit(127);
}

}  // namespace

std::string command_text(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    const bool plain = !a.empty() && a.find_first_of(" \t\n'\"\\$`*?;&|<>()#~{}[]!") == std::string::npos;
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
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (opt.append_log ? O_APPEND : O_TRUNC), 0644);
  if (fd < 0) throw std::runtime_error(fmt::format("{}: cannot write the log: {}", log.string(), std::strerror(errno)));
  if (opt.append_log) {
    const std::string line = "$ " + command_text(argv) + "\n";
    if (::write(fd, line.data(), line.size()) < 0) {
      throw std::runtime_error(fmt::format("{}: cannot write the log", log.string()));
    }
  }
  std::vector<char*> args = c_args(argv);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // the harness killed outright (SIGKILL): end the program too
    const int null_fd = ::open("/dev/null", O_RDONLY);  // nothing the harness starts reads its input
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    // The harness is single-threaded, so changing the environment here is safe.
    for (const auto& [k, v] : opt.env) setenv(k.c_str(), v.c_str(), 1);
    for (const std::string& k : opt.unset_env) unsetenv(k.c_str());
    if (!opt.cwd.empty() && chdir(opt.cwd.c_str()) != 0) std::_Exit(127);
    exec_child(args);
  }
  ::close(fd);
  setpgid(pid, pid);
  g_child_group = pid;
  const auto t0 = std::chrono::steady_clock::now();
  auto next_tick = t0 + std::chrono::milliseconds(500);
  int status = 0;
  for (;;) {
    if (opt.on_tick && std::chrono::steady_clock::now() >= next_tick) {
      opt.on_tick();
      next_tick += std::chrono::milliseconds(500);
    }
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) break;
    if (opt.timeout_s > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > opt.timeout_s) {
      kill(-pid, SIGTERM);
      for (int i = 0; i < 30 && waitpid(pid, &status, WNOHANG) == 0; ++i) {  // up to 3 s to end cleanly
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      g_child_group = 0;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  g_child_group = 0;
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
