// Small file helpers shared by the trainer and the harness.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "util/json.h"

namespace gpt2 {

// What kind of file a stat mode names, for errors: "a directory", "not a
// regular file (a FIFO)", ... (read as "<path> is <kind>").
std::string file_kind(unsigned mode);

// Writes `text` to a fresh temporary beside `path` (created exclusively, not
// through a link: O_CREAT | O_EXCL | O_NOFOLLOW) and renames it over `path`:
// readers see the old file or the new one, never a half-written one, and a
// symbolic link named `path` is replaced, never written through. `durable`:
// the file is synced before the rename and its folder after it, so the new
// file survives a crash of the machine once this returns.
void write_file_atomically(const std::filesystem::path& path, const std::string& text, bool durable = false);

// fsync() of a folder: the names created, renamed or removed in it are
// durable once this returns. Throws std::runtime_error naming the folder.
void sync_directory(const std::filesystem::path& dir);

// Every file written on the filesystem holding `dir` made durable at once
// (syncfs): one call where thousands of files would take thousands of fsyncs.
void sync_filesystem(const std::filesystem::path& dir);

// Creates `path` for writing as a new file, never through a symbolic link
// (O_NOFOLLOW) and never an existing one (O_EXCL): the one way a run or the
// harness creates a file in place. Returns the descriptor; throws
// std::runtime_error naming the file and the reason (std::invalid_argument
// for a link or an existing file at `path`: bad input, say what is there).
int create_new_file(const std::filesystem::path& path);

// Writes all n bytes to `fd` (retrying short writes and EINTR); throws
// std::runtime_error "<path>: write failed: <reason>" (a full disk: ENOSPC).
void write_all(int fd, const void* bytes, size_t n, const std::filesystem::path& path);

// Opens `path` for writing in place (truncated, or appended to with
// `append`), never through a symbolic link (O_NOFOLLOW): for the streams a
// run extends as it goes (the metrics stream, the pipeline timeline, a log).
// Returns the descriptor; throws std::invalid_argument for a link at `path`,
// std::runtime_error otherwise, naming the file.
int open_output(const std::filesystem::path& path, bool append = false);

// An input file, opened with its kind and size checked before anything is
// read (docs/guarantees.md): a regular file only (a directory, a device, a
// FIFO or a socket is refused by its type, without opening it for reading,
// so nothing blocks and nothing endless is read), at most `max_bytes`.
// Errors are std::invalid_argument "<what>: <path>: <problem>" (`what`: the
// key or option that named it, "" for none), where `expected` says what the
// file should have been ("a checkpoint file", "a YAML file").
class InputFile {
 public:
  InputFile(const std::filesystem::path& path, uint64_t max_bytes, const std::string& what,
            const std::string& expected);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }
  uint64_t position() const { return pos_; }
  // Exactly n bytes; fewer (the file shrank) throws "truncated".
  void read(void* dst, size_t n);
  // Moves to byte `offset` (at most size()) for the next read.
  void seek(uint64_t offset);
  // The rest of the file.
  std::string read_rest();
  // "<what>: <path>: <problem>": for the callers' own checks of the content.
  std::string error(const std::string& problem) const;

 private:
  std::filesystem::path path_;
  std::string what_;
  int fd_ = -1;
  uint64_t size_ = 0, pos_ = 0;
};

// The whole of a small input file (configurations, hostfiles, experiment
// files, results): InputFile's checks, then its text.
std::string read_input_file(const std::filesystem::path& path, uint64_t max_bytes, const std::string& what,
                            const std::string& expected);

// The same for a record the programs wrote themselves (a metrics stream, the
// harness's CSV and JSON files), bounded by kMaxRecordBytes: a failure there
// means a damaged record, so it is a std::runtime_error (same message).
std::string read_record_file(const std::filesystem::path& path, const std::string& what, const std::string& expected);

// The engine's cache folder (measurements kept between runs: the MFU peak,
// the GEMM providers' choices): $GPT2_CACHE_DIR, else
// $XDG_CACHE_HOME/gpt2-engine, else $HOME/.cache/gpt2-engine; "" if none of
// them is set. Not created here.
std::string engine_cache_dir();
// The file `name` in that folder ("" when none is known), the folder created
// first when `create` (failures ignored: the caches are a convenience).
std::string engine_cache_file(const std::string& name, bool create = false);

// Size bounds of the inputs (docs/guarantees.md).
inline constexpr uint64_t kMaxTextInputBytes = uint64_t{16} << 20;  // configurations, hostfiles, experiments, records
inline constexpr uint64_t kMaxCorpusBytes = uint64_t{1} << 30;      // data.corpus
inline constexpr uint64_t kMaxCheckpointBytes = uint64_t{64} << 30;  // above any model this engine trains
inline constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 30;       // metrics streams, runs.csv, loss.csv, results

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

// The rules every command that writes a file or folder it was given follows
// (export, import, prepare, harness compare; docs/guarantees.md "What a
// command writes"), checked before any work starts.
struct OutputRules {
  std::string option = "--out";                   // names the path in errors
  std::vector<std::filesystem::path> inputs;      // the command's inputs
  bool overwrite = false;                         // an existing `out` may be replaced
  bool folder = false;                            // `out` is a folder (else a file)
};
// Refuses `out` (std::invalid_argument "<option>: '<out>' <why>"; the
// programs exit with status 2) when it is empty; is in a folder that does not
// exist or is not writable; is one of `inputs` (the same
// file through any name or link); exists (a file, a folder that is not empty,
// or a link, dangling or not) without `overwrite`, or is of the other kind
// (a folder where a file is written); lies in a training run's folder (one
// holding run.json, metrics.jsonl or metrics.jsonl.partial); or is in a
// folder another process holds locked (a running run, the harness).
void check_output(const std::filesystem::path& out, const OutputRules& rules);

}  // namespace gpt2
