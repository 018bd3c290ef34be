#include "train/formats/checkpoint_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "util/console.h"
#include "util/files.h"
#include "util/json.h"
#include "util/text.h"

namespace gpt2 {

namespace fs = std::filesystem;

namespace {

// The step of a folder named "step-<digits>", or -1.
int64_t step_of(const std::string& name) {
  const std::string prefix = "step-";
  if (name.size() <= prefix.size() || name.size() > prefix.size() + 18 || name.rfind(prefix, 0) != 0) return -1;
  int64_t step = -1;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  const auto [end, ec] = std::from_chars(first, last, step);
  return ec == std::errc() && end == last ? step : -1;
}

std::string step_name(int64_t step) { return fmt::format("step-{:08d}", step); }

// A regular file's size, or -1 (missing, a link, not a regular file).
int64_t regular_size(const fs::path& p) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(p, ec);
  if (ec || !fs::is_regular_file(st)) return -1;
  const uintmax_t n = fs::file_size(p, ec);
  return ec ? -1 : static_cast<int64_t>(n);
}

void remove_tree(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) throw std::runtime_error(fmt::format("{}: cannot remove: {}", p.string(), ec.message()));
}

// <out>/checkpoint.bin becomes a second name of `file`, swapped in by a
// rename; with no file (a sharded checkpoint) it is removed, as an older
// checkpoint's name would mislead.
void name_newest(const fs::path& out, const fs::path& file) {
  const fs::path latest = out / kCheckpointFile;
  std::error_code ec;
  if (file.empty()) {
    if (fs::is_regular_file(fs::symlink_status(latest, ec))) {
      fs::remove(latest, ec);
      sync_directory(out);
    }
    return;
  }
  const fs::path tmp = fmt::format("{}.tmp.link.{}", latest.string(), ::getpid());
  fs::remove(tmp, ec);
  fs::create_hard_link(file, tmp, ec);
  if (ec) {  // a file system without hard links: a copy, synced
    fs::copy_file(file, tmp, ec);
    const int fd = ec ? -1 : ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) {
      const std::string why = ec ? ec.message() : std::strerror(errno);
      if (fd >= 0) ::close(fd);
      fs::remove(tmp, ec);
      throw std::runtime_error(fmt::format("{}: cannot link or copy the new checkpoint: {}", latest.string(), why));
    }
    ::close(fd);
  }
  fs::rename(tmp, latest, ec);
  if (ec) throw std::runtime_error(fmt::format("{}: cannot move to the new checkpoint: {}", latest.string(), ec.message()));
  sync_directory(out);
}

}  // namespace

namespace {
// A sharded checkpoint's folder (it has a manifest, and no checkpoint.bin).
bool sharded_folder(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(dir / kManifestFile, ec));
}
}  // namespace

fs::path StoredCheckpoint::file() const { return sharded_folder(dir) ? dir : dir / kCheckpointFile; }

std::string checkpoint_problem(const fs::path& dir) {
  const fs::path marker = dir / kCompleteMarker;
  if (regular_size(marker) < 0) return fmt::format("no {} marker (a save that did not finish)", kCompleteMarker);
  Json j;
  try {
    j = parse_json(read_input_file(marker, kMaxTextInputBytes, "", "a checkpoint's marker"), marker.string());
  } catch (const std::exception& e) {
    return fmt::format("its {} marker is unreadable ({})", kCompleteMarker, excerpt(e.what(), 300));
  }
  if (!j.is_object() || !j.contains("files") || !j["files"].is_array() || j["files"].empty()) {
    return fmt::format("its {} marker names no files", kCompleteMarker);
  }
  const int64_t step = step_of(dir.filename().string());
  if (step >= 0 && (!j.contains("step") || !j["step"].is_number_integer() || j["step"].get<int64_t>() != step)) {
    return fmt::format("its {} marker is not the folder's step {}", kCompleteMarker, step);
  }
  for (const Json& f : j["files"]) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("bytes") ||
        !f["bytes"].is_number_unsigned()) {
      return fmt::format("its {} marker has a malformed file entry", kCompleteMarker);
    }
    const std::string name = f["name"].get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      return fmt::format("its {} marker names '{}', not a file of the folder", kCompleteMarker, excerpt(name));
    }
    const int64_t have = regular_size(dir / name);
    const uint64_t want = f["bytes"].get<uint64_t>();
    if (have < 0) return fmt::format("{} is missing", excerpt(name));
    if (static_cast<uint64_t>(have) != want) {
      return fmt::format("{} has {} bytes, its marker says {}", excerpt(name), have, want);
    }
  }
  return "";
}

std::vector<StoredCheckpoint> stored_checkpoints(const fs::path& out) {
  std::vector<StoredCheckpoint> found;
  const fs::path root = out / kCheckpointsFolder;
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(root, ec))) return found;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const int64_t step = step_of(e.path().filename().string());
    if (step < 0 || !fs::is_directory(fs::symlink_status(e.path(), ec))) continue;
    found.push_back({e.path(), step, checkpoint_problem(e.path())});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return found;
}

std::string given_checkpoint_file(const std::string& path) {
  std::error_code ec;
  const bool folder = fs::is_directory(path, ec);
  const fs::path dir = fs::weakly_canonical(folder ? fs::path(path) : fs::path(path).parent_path(), ec);
  if (ec || step_of(dir.filename().string()) < 0 || dir.parent_path().filename() != kCheckpointsFolder ||
      !fs::is_directory(dir, ec)) {
    return path;  // not a step folder (or none there: the reader says "no such file")
  }
  if (const std::string why = checkpoint_problem(dir); !why.empty()) {
    throw std::invalid_argument(fmt::format("'{}' is an incomplete checkpoint: {}; take a complete one (--resume "
                                            "auto finds the newest)", path, why));
  }
  if (!folder || sharded_folder(dir)) return path;
  return (fs::path(path) / kCheckpointFile).string();
}

fs::path begin_checkpoint(const fs::path& out, int64_t step) {
  const fs::path root = out / kCheckpointsFolder;
  const fs::path dir = root / step_name(step);
  std::error_code ec;
  const bool made_root = fs::create_directory(root, ec);
  if (ec) throw std::runtime_error(fmt::format("{}: cannot create: {}", root.string(), ec.message()));
  if (made_root) sync_directory(out);
  const fs::file_status was = fs::symlink_status(dir, ec);
  if (fs::is_directory(was)) {  // an earlier save of this step: it no longer counts, then goes
    fs::remove(dir / kCompleteMarker, ec);
    sync_directory(dir);
  }
  if (fs::exists(was)) remove_tree(dir);  // a link is removed, never followed
  fs::create_directory(dir, ec);
  if (ec) throw std::runtime_error(fmt::format("{}: cannot create: {}", dir.string(), ec.message()));
  sync_directory(root);
  return dir;
}

fs::path commit_checkpoint(const fs::path& out, const fs::path& dir, int64_t step,
                           const std::vector<std::string>& files, int keep) {
  Json list = Json::array();
  for (const std::string& name : files) {
    const int64_t bytes = regular_size(dir / name);
    if (bytes < 0) throw std::runtime_error(fmt::format("{}: the save wrote no {}", dir.string(), name));
    list.push_back({{"name", name}, {"bytes", static_cast<uint64_t>(bytes)}});
  }
  // The files are durable (each synced and renamed, the folder synced): the marker goes last.
  try {
    write_file_atomically(dir / kCompleteMarker, json_text(Json{{"step", step}, {"files", list}}, 1) + "\n", true);
  } catch (...) {
    abandon_checkpoint(dir);
    throw;
  }

  // <out>/checkpoint.bin: a second name of the new file (a sharded checkpoint has none).
  const bool one_file = std::find(files.begin(), files.end(), kCheckpointFile) != files.end();
  name_newest(out, one_file ? dir / kCheckpointFile : fs::path());

  // Only now the old ones go: the newest `keep` complete ones stay. The new
  // checkpoint is complete whatever happens here: a removal that fails is
  // said and the run goes on.
  try {
    const std::vector<StoredCheckpoint> all = stored_checkpoints(out);
    int kept = 0;
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      if (it->dir == dir) {
        ++kept;
        continue;
      }
      const bool stays = it->complete() && it->step < step && kept < keep;
      kept += stays;
      if (!stays) remove_tree(it->dir);
    }
    for (const auto& e : fs::directory_iterator(out)) {  // the link temporaries of a save a crash cut short
      if (e.path().filename().string().rfind(std::string(kCheckpointFile) + ".tmp.link.", 0) == 0) fs::remove(e.path());
    }
    sync_directory(out / kCheckpointsFolder);
  } catch (const std::exception& e) {
    // Said once a run: a failing removal would otherwise repeat at every save.
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      console::err(fmt::format("warning: {}: older checkpoints not removed: {} (said once; later saves may also "
                               "leave theirs)\n", out.string(), e.what()));
    }
  }
  return one_file ? dir / kCheckpointFile : dir;
}

void abandon_checkpoint(const fs::path& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace gpt2
