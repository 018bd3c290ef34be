#include "util/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>

#include "util/json.h"
#include "util/text.h"

namespace gpt2 {

std::string file_kind(unsigned mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "not a regular file (a character device)";
  if (S_ISBLK(mode)) return "not a regular file (a block device)";
  if (S_ISFIFO(mode)) return "not a regular file (a FIFO)";
  if (S_ISSOCK(mode)) return "not a regular file (a socket)";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

void write_all(int fd, const void* bytes, size_t n, const std::filesystem::path& path) {
  const auto* data = static_cast<const char*>(bytes);
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw std::runtime_error(fmt::format("{}: write failed: {}", path.string(), std::strerror(errno)));
    data += w;
    n -= static_cast<size_t>(w);
  }
}

int create_new_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd >= 0) return fd;
  const int err = errno;
  struct stat st {};
  if (err == EEXIST && ::lstat(path.c_str(), &st) == 0) {
    throw std::invalid_argument(fmt::format("{}: already exists ({}); nothing is written through or over it",
                                            path.string(), S_ISLNK(st.st_mode) ? "a symbolic link" : "a file"));
  }
  throw std::runtime_error(fmt::format("{}: cannot create: {}", path.string(), std::strerror(err)));
}

int open_output(const std::filesystem::path& path, bool append) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
  if (fd >= 0) return fd;
  const int err = errno;
  if (err == ELOOP) {
    throw std::invalid_argument(
        fmt::format("{}: is a symbolic link; nothing is written through it (remove it, or choose another directory)",
                    path.string()));
  }
  throw std::runtime_error(fmt::format("{}: cannot write: {}", path.string(), std::strerror(err)));
}

void write_file_atomically(const std::filesystem::path& path, const std::string& text, bool durable) {
  // A fresh name each time: a stale temporary (or a link planted in its
  // place) is never opened.
  static std::atomic<uint64_t> serial{0};
  const std::filesystem::path tmp =
      fmt::format("{}.tmp.{}.{}", path.string(), ::getpid(), serial.fetch_add(1, std::memory_order_relaxed));
  const int fd = create_new_file(tmp);
  try {
    write_all(fd, text.data(), text.size(), tmp);
    if (durable && ::fsync(fd) != 0) {
      const int err = errno;
      ::close(fd);
      throw std::runtime_error(fmt::format("{}: sync failed: {}", tmp.string(), std::strerror(err)));
    }
    if (::close(fd) != 0) throw std::runtime_error(fmt::format("{}: write failed: {}", tmp.string(), std::strerror(errno)));
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
  std::filesystem::rename(tmp, path);
  if (durable) sync_directory(path.parent_path());
}

namespace {

// fsync() of the folder, or syncfs() of its filesystem (`whole`).
void sync_through_folder(const std::filesystem::path& dir, bool whole) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const bool synced = fd >= 0 && (whole ? ::syncfs(fd) : ::fsync(fd)) == 0;
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!synced) {
    throw std::runtime_error(fmt::format("{}: syncing {} failed: {}", dir.string(),
                                         whole ? "its filesystem" : "the folder", std::strerror(err)));
  }
}

}  // namespace

void sync_directory(const std::filesystem::path& dir) { sync_through_folder(dir, false); }

void sync_filesystem(const std::filesystem::path& dir) { sync_through_folder(dir, true); }

InputFile::InputFile(const std::filesystem::path& path, uint64_t max_bytes, const std::string& what,
                     const std::string& expected)
    : path_(path), what_(what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw std::invalid_argument(error(errno == ENOENT ? "no such file" : std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) throw std::invalid_argument(error(fmt::format("is {}, expected {}", file_kind(st.st_mode), expected)));
  // O_NONBLOCK: should the path have become a FIFO since, opening it does not wait for a writer.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) throw std::invalid_argument(error(fmt::format("cannot read: {}", std::strerror(errno))));
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw std::invalid_argument(error(fmt::format("is {}, expected {}", file_kind(st.st_mode), expected)));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > max_bytes) {
    ::close(fd_);
    fd_ = -1;
    const bool gib = max_bytes % (uint64_t{1} << 30) == 0, mib = max_bytes % (uint64_t{1} << 20) == 0;
    const std::string limit = gib   ? fmt::format("{} GiB", max_bytes >> 30)
                              : mib ? fmt::format("{} MiB", max_bytes >> 20)
                                    : fmt::format("{} bytes", max_bytes);
    throw std::invalid_argument(error(fmt::format("is {} bytes, above the limit of {} ({} bytes) for {}", size_, limit,
                                                  max_bytes, expected)));
  }
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string InputFile::error(const std::string& problem) const {
  return fmt::format("{}{}: {}", what_.empty() ? "" : what_ + ": ", path_.string(), problem);
}

void InputFile::read(void* dst, size_t n) {
  char* out = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::read(fd_, out, n);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) throw std::invalid_argument(error(fmt::format("read failed: {}", std::strerror(errno))));
    if (r == 0) throw std::invalid_argument(error(fmt::format("truncated: {} bytes, more were expected", pos_)));
    out += r;
    n -= static_cast<size_t>(r);
    pos_ += static_cast<uint64_t>(r);
  }
}

void InputFile::seek(uint64_t offset) {
  if (offset > size_) throw std::invalid_argument(error(fmt::format("offset {} is past its {} bytes", offset, size_)));
  if (::lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0) {
    throw std::invalid_argument(error(fmt::format("seek failed: {}", std::strerror(errno))));
  }
  pos_ = offset;
}

std::string InputFile::read_rest() {
  // Up to the size checked at open: a file that grew since is read no further.
  std::string text(static_cast<size_t>(size_ - std::min(pos_, size_)), '\0');
  char* out = text.data();
  size_t n = text.size(), got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd_, out + got, n - got);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) throw std::invalid_argument(error(fmt::format("read failed: {}", std::strerror(errno))));
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  text.resize(got);
  pos_ += got;
  return text;
}

std::string read_input_file(const std::filesystem::path& path, uint64_t max_bytes, const std::string& what,
                            const std::string& expected) {
  InputFile f(path, max_bytes, what, expected);
  return f.read_rest();
}

std::string read_record_file(const std::filesystem::path& path, const std::string& what, const std::string& expected) {
  try {
    return read_input_file(path, kMaxRecordBytes, what, expected);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
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
  std::string text;
  try {
    text = read_input_file(file, kMaxTextInputBytes, "", "a lock holder's record");
  } catch (const std::invalid_argument&) {
    return "it has not yet recorded itself in " + file.filename().string();
  }
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

namespace {

// A training run's folder (core/train/run/run_dir.h: these mark one).
bool is_run_folder(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const char* marker : {"run.json", "metrics.jsonl", "metrics.jsonl.partial"}) {
    if (std::filesystem::symlink_status(dir / marker, ec).type() != std::filesystem::file_type::not_found && !ec) {
      return true;
    }
  }
  return false;
}

// The training run folder `dir` lies in: itself, or the run above its
// checkpoints folder or one of its step folders (core/train/formats/checkpoint_store.h);
// "" for none.
std::filesystem::path run_folder_of(const std::filesystem::path& dir) {
  const std::filesystem::path abs = std::filesystem::absolute(dir).lexically_normal();
  if (is_run_folder(abs)) return dir;
  for (const std::filesystem::path& p : {abs, abs.parent_path()}) {  // checkpoints/, or checkpoints/step-N/
    if (p.filename() == "checkpoints" && is_run_folder(p.parent_path())) return p.parent_path();
  }
  return {};
}

// Whether another process holds `dir` locked (DirectoryLock's flock): taken
// and dropped at once, so checking writes nothing and holds nothing.
bool locked_by_another(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;  // shared: probes never meet each other
  ::close(fd);
  return held;
}

// `p` with every link of the part that exists resolved (the rest appended as
// written, normalised): two names of one place compare equal.
std::filesystem::path resolved(const std::filesystem::path& p) {
  std::error_code ec;
  std::filesystem::path r = std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec), ec);
  if (ec) r = std::filesystem::absolute(p, ec).lexically_normal();
  return r;
}

// Whether `p` is `dir` or lies below it (both resolved), by whole components.
bool lies_within(const std::filesystem::path& p, const std::filesystem::path& dir) {
  auto d = dir.begin(), q = p.begin();
  for (; d != dir.end(); ++d, ++q) {
    if (d->empty() && std::next(d) == dir.end()) break;  // "dir/": the trailing empty component
    if (q == p.end() || *q != *d) return false;
  }
  return true;
}

}  // namespace

void check_output(const std::filesystem::path& given, const OutputRules& rules) {
  namespace fs = std::filesystem;
  const auto refuse = [&](const std::string& why) {
    throw std::invalid_argument(fmt::format("{}: '{}' {}", rules.option, excerpt(given.string(), 200), why));
  };
  if (given.empty()) throw std::invalid_argument(fmt::format("{}: where to write is required", rules.option));
  fs::path out = given;  // "dir/" names dir: its parent is dir's, not dir itself
  while (out.has_relative_path() && out.filename().empty()) out = out.parent_path();
  struct stat out_st {};
  const bool exists_or_link = ::lstat(out.c_str(), &out_st) == 0;
  struct stat target {};
  if (exists_or_link && ::stat(out.c_str(), &target) == 0) {
    for (const fs::path& in : rules.inputs) {
      struct stat in_st {};
      if (::stat(in.c_str(), &in_st) == 0 && in_st.st_dev == target.st_dev && in_st.st_ino == target.st_ino) {
        refuse(fmt::format("is this command's input '{}'; write the output elsewhere", excerpt(in.string(), 200)));
      }
    }
  }
  // By place, resolved through links: nothing written inside an input folder
  // (a file of it replaced), and no input inside a folder that is written
  // (--overwrite replaces that folder's files). --overwrite never widens this.
  const fs::path out_real = resolved(out);
  for (const fs::path& in : rules.inputs) {
    struct stat in_st {};
    if (in.empty() || ::stat(in.c_str(), &in_st) != 0) continue;
    const fs::path in_real = resolved(in);
    if (S_ISDIR(in_st.st_mode) && lies_within(out_real, in_real)) {
      refuse(fmt::format("lies in this command's input folder '{}'; write the output elsewhere",
                         excerpt(in.string(), 200)));
    }
    if (rules.folder && lies_within(in_real, out_real)) {
      refuse(
          fmt::format("holds this command's input '{}', which writing there could replace; move it, or write "
                      "elsewhere",
                      excerpt(in.string(), 200)));
    }
  }
  if (exists_or_link) {
    const bool is_dir = S_ISDIR(out_st.st_mode);
    if (rules.folder && !is_dir) refuse("exists and is not a folder");
    if (!rules.folder && is_dir) refuse("is a folder; name the file to write");
    std::error_code ec;
    const bool empty_dir = is_dir && fs::is_empty(out, ec) && !ec;
    if (!rules.overwrite && !empty_dir) {
      refuse(fmt::format("{}; choose another path, or give --overwrite to replace it",
                         S_ISLNK(out_st.st_mode) ? "exists (a symbolic link)" : is_dir ? "exists and is not empty"
                                                                                       : "exists"));
    }
  }
  const fs::path parent = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  struct stat parent_st {};
  if (::stat(parent.c_str(), &parent_st) != 0 || !S_ISDIR(parent_st.st_mode)) {
    refuse(fmt::format("cannot be written: its folder '{}' does not exist", excerpt(parent.string(), 200)));
  }
  if (::access(parent.c_str(), W_OK | X_OK) != 0) {
    refuse(fmt::format("cannot be written: its folder '{}' is not writable", excerpt(parent.string(), 200)));
  }
  if (rules.folder && exists_or_link && is_run_folder(out)) refuse("is a training run's folder");
  if (const fs::path run = run_folder_of(parent); !run.empty()) {
    refuse(fmt::format("lies in the training run folder '{}', whose files are the run's; write it elsewhere",
                       excerpt(run.string(), 200)));
  }
  if (rules.folder && exists_or_link && locked_by_another(out)) refuse("is held by another process (locked)");
  if (locked_by_another(parent)) {
    refuse(fmt::format("lies in '{}', which another process holds (a running run or harness); write it elsewhere",
                       excerpt(parent.string(), 200)));
  }
}

std::string engine_cache_dir() {
  if (const char* d = std::getenv("GPT2_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return (std::filesystem::path(d) / "gpt2-engine").string();
  if (const char* d = std::getenv("HOME"); d && *d) return (std::filesystem::path(d) / ".cache" / "gpt2-engine").string();
  return "";
}

std::string engine_cache_file(const std::string& name, bool create) {
  const std::string dir = engine_cache_dir();
  if (dir.empty()) return "";
  if (create) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
  }
  return (std::filesystem::path(dir) / name).string();
}

}  // namespace gpt2
