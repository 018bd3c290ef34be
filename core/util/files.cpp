#include "util/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "util/json.h"

namespace gpt2 {

void write_file_atomically(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp);
    f << text;
    if (!f.flush()) throw std::runtime_error(fmt::format("{}: write failed", tmp.string()));
  }
  std::filesystem::rename(tmp, path);
}

namespace {

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return when;
}

// "pid 12, host h, since T" from the holder's file, or why it is unknown.
std::string describe_holder(const std::filesystem::path& file) {
  std::ifstream f(file);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  try {
    const Json j = Json::parse(text);
    if (j.contains("pid") && j.contains("host") && j.contains("started")) {
      return fmt::format("pid {} on {}, since {}", j["pid"].dump(), j["host"].get<std::string>(),
                         j["started"].get<std::string>());
    }
  } catch (const Json::exception&) {
  }
  return "it has not yet recorded itself in " + file.filename().string();
}

}  // namespace

Json holder_info() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return Json{{"pid", ::getpid()}, {"host", std::string(host)}, {"started", utc_now()}};
}

DirectoryLock::DirectoryLock(const std::filesystem::path& dir, const std::string& what_dir,
                             const std::string& holder_file) {
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) {
    throw std::runtime_error(fmt::format("{}: cannot open '{}': {}", what_dir, dir.string(), std::strerror(errno)));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) {
      throw std::runtime_error(fmt::format("{}: cannot lock '{}': {}", what_dir, dir.string(), std::strerror(err)));
    }
    throw std::invalid_argument(fmt::format("{}: '{}' is in use by another run ({}); wait for it to end or choose "
                                            "another directory", what_dir, dir.string(),
                                            holder_file.empty() ? "another process"
                                                                : describe_holder(dir / holder_file)));
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace gpt2
