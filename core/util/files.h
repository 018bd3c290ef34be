// Small file helpers shared by the trainer and the harness.
#pragma once

#include <filesystem>
#include <string>

#include "util/json.h"

namespace gpt2 {

// Writes `text` to "<path>.tmp" and renames it over `path`: readers see the
// old file or the new one, never a half-written one.
void write_file_atomically(const std::filesystem::path& path, const std::string& text);

// An exclusive lock on a directory, held while the object lives: flock() on
// the directory itself, so taking it writes nothing into the directory (a run
// refused for bad input leaves it as it was), and the kernel drops it when
// the process ends, however it ends: a killed run never leaves a stale lock.
// Who holds it is read from `holder_file` in the directory (a JSON object
// with "pid", "host" and "started", as holder_info() gives), which the holder
// writes once it starts writing ("" for none). `what_dir` names the directory in errors
// ("--out", "results folder").
class DirectoryLock {
 public:
  // Throws std::invalid_argument "<what_dir>: '<dir>' is in use by another
  // run (pid .., host .., since ..)" when another process holds the lock,
  // std::runtime_error when the directory cannot be opened.
  DirectoryLock(const std::filesystem::path& dir, const std::string& what_dir, const std::string& holder_file);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

// {"pid": .., "host": .., "started": "<UTC time>"} of this process: what a
// lock holder records about itself.
Json holder_info();

}  // namespace gpt2
