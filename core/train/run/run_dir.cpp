#include "train/run/run_dir.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "train/formats/checkpoint.h"
#include "train/formats/checkpoint_store.h"
#include "train/formats/model_source.h"
#include "util/json.h"
#include "util/text.h"

namespace gpt2 {

namespace fs = std::filesystem;

namespace {

// The files a run writes into its directory; each one's temporaries are
// "<name>.tmp" followed by anything (util/files.h).
const char* const kRunFiles[] = {
    "config.yaml",    "metrics.jsonl", "metrics.jsonl.partial", "metrics.jsonl.partial.new",
    "checkpoint.bin", "run.json",      "timeline.jsonl",        "traces",
    "checkpoints"};

// Whether `name` is a run file or one of their temporaries.
bool is_run_file(const std::string& name) {
  for (const char* f : kRunFiles) {
    const std::string base = f;
    if (name == base || name.rfind(base + ".tmp", 0) == 0) return true;
  }
  return false;
}

// Same file (the user may name the directory's checkpoint by another path).
bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

// The run files (and temporaries) `out` holds, links included (never
// followed), but none of the run's `inputs`.
std::vector<fs::path> run_files_in(const fs::path& out, const std::vector<fs::path>& inputs) {
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out, ec)) {
    if (!is_run_file(e.path().filename().string())) continue;
    if (std::any_of(inputs.begin(), inputs.end(), [&](const fs::path& in) { return same_file(in, e.path()); })) continue;
    found.push_back(e.path());
  }
  return found;
}

const fs::path& created(const fs::path& out) {
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw std::invalid_argument(fmt::format("--out: cannot create '{}': {}", out.string(), ec.message()));
  if (!fs::is_directory(out)) throw std::invalid_argument(fmt::format("--out: '{}' is not a directory", out.string()));
  return out;
}

std::string read_run_id(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(file, ec))) return "";
  const std::string text = read_input_file(file, kMaxTextInputBytes, "--out", "the run's run.json");
  try {
    const Json j = Json::parse(text);
    if (j.contains("run_id") && j["run_id"].is_string()) return j["run_id"].get<std::string>();
  } catch (const Json::exception&) {
  }
  throw std::invalid_argument(fmt::format("--out: '{}' is not readable run information; remove the directory's "
                                          "run or pass --overwrite", file.string()));
}

// `out` holds a run of this engine: run.json, a regular file naming a run
// id. Else `--resume auto` touches nothing there (std::invalid_argument naming why).
void require_own_run(const fs::path& out) {
  std::error_code ec;
  const fs::path file = out / "run.json";
  if (!fs::is_regular_file(fs::symlink_status(file, ec))) {
    throw std::invalid_argument(fmt::format(
        "--resume auto: '{}' holds files but no run of this engine (no run.json); nothing was touched: give an empty "
        "or new folder, or a run's folder",
        excerpt(out.string(), 200)));
  }
  bool named = false;
  try {
    named = !read_run_id(file).empty();
  } catch (const std::invalid_argument&) {  // not JSON, or no run_id: not named
  }
  if (!named) {
    throw std::invalid_argument(
        fmt::format("--resume auto: '{}' names no run id; nothing was touched: give an empty "
                    "or new folder, or a run's folder",
                    excerpt(file.string(), 200)));
  }
}

// A fresh start over a run's files removes its checkpoints folder whole:
// refused when that folder holds anything a run did not write there.
void check_only_step_folders(const fs::path& out) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out / kCheckpointsFolder, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0) continue;
    throw std::invalid_argument(fmt::format(
        "--resume auto: '{}' is not a checkpoint this run wrote, and a fresh start over the run's files would remove "
        "it; nothing was touched: move it, or start the run in another folder",
        excerpt(e.path().string(), 200)));
  }
}

}  // namespace

AutoResume resolve_auto_resume(const fs::path& out) {
  AutoResume r;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(out, ec))) {
    r.note = fmt::format("--resume auto: '{}' does not exist yet: a fresh start", out.string());
    return r;
  }
  if (!fs::is_directory(out)) throw std::invalid_argument(fmt::format("--out: '{}' is not a directory", out.string()));
  if (fs::is_empty(out, ec) && !ec) {
    r.note = fmt::format("--resume auto: '{}' is empty: a fresh start", out.string());
    return r;
  }
  require_own_run(out);  // only a run of this engine's folder is acted on
  bool latest = false;
  for (const auto& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    if (name == kCheckpointFile) latest = true;
    // A single-file save cut short (before step folders): its temporary.
    if (name.rfind("checkpoint.bin.tmp", 0) == 0 && name.find(".tmp.link.") == std::string::npos) {
      r.skipped.push_back(e.path().string() + " (a temporary)");
    }
  }
  // The newest complete step folder whose bytes are whole (a damaged newest
  // one is named and passed over: a requeued job resumes from the one
  // before); else checkpoint.bin (a run from before step folders).
  const std::vector<StoredCheckpoint> stored = stored_checkpoints(out);
  for (auto s = stored.rbegin(); s != stored.rend() && r.checkpoint.empty(); ++s) {
    if (!s->complete()) {
      r.skipped.push_back(fmt::format("{} ({})", s->dir.string(), s->problem));
    } else if (const std::string why = stored_checkpoint_problem(s->file()); !why.empty()) {
      r.skipped.push_back(fmt::format("{} ({})", s->dir.string(), excerpt(why, 200)));
    } else {
      r.checkpoint = s->file().string();
      r.step = s->step;
    }
  }
  if (r.checkpoint.empty() && latest) {
    const fs::path file = out / kCheckpointFile;
    if (const std::string why = checkpoint_bytes_problem(file.string()); !why.empty()) {
      r.skipped.push_back(fmt::format("{} ({})", file.string(), excerpt(why, 200)));
    } else {
      r.checkpoint = file.string();
    }
  }
  std::string skipped;
  for (const std::string& s : r.skipped) skipped += (skipped.empty() ? "" : ", ") + s;
  const std::string passed_over = skipped.empty() ? "" : fmt::format(" (not taken: {})", skipped);
  if (!r.checkpoint.empty()) {
    r.note =
        fmt::format("--resume auto: resuming from {}, the newest complete checkpoint{}", r.checkpoint, passed_over);
  } else if (!r.skipped.empty()) {
    throw std::invalid_argument(fmt::format(
        "--resume auto: '{}' holds only incomplete or damaged checkpoints ({}); remove them to start afresh, or "
        "--resume a complete checkpoint",
        out.string(), skipped));
  } else {
    check_only_step_folders(out);
    r.replace = true;
    r.note =
        fmt::format("--resume auto: the run in '{}' wrote no checkpoint: a fresh start over its files", out.string());
  }
  return r;
}

std::string new_run_id() {
  std::random_device rd;
  const uint64_t x = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("{:016x}", x);
}

RunDirectory::RunDirectory(const fs::path& out, DirIntent intent, const std::string& stage,
                           const std::vector<fs::path>& inputs)
    : out_(out), stage_(stage), lock_(created(out), "--out", "run.json"), intent_(intent), inputs_(inputs) {
  // Checked without writing anything: a refused run leaves the directory as it was.
  if (::access(out.c_str(), W_OK | X_OK) != 0) {
    throw std::invalid_argument(fmt::format("--out: '{}' is not writable: {}", out.string(), std::strerror(errno)));
  }
  holds_run_ = !run_files_in(out, inputs_).empty();
  const bool finished = fs::exists(out / "metrics.jsonl");
  // An unreadable run.json is the old run's to lose under --overwrite; otherwise it is an error.
  try {
    dir_run_id_ = read_run_id(out / "run.json");
  } catch (const std::invalid_argument&) {
    if (intent != DirIntent::kOverwrite) throw;
  }
  run_id_ = new_run_id();  // a resumed run takes its checkpoint's instead (check_resume)
  if (!holds_run_) return;
  // A run writes and prunes its checkpoints in its own folder, never through
  // a link to somewhere else (--overwrite removes the link itself).
  const fs::path ckdir = out / kCheckpointsFolder;
  if (std::error_code e; intent != DirIntent::kOverwrite && fs::exists(fs::symlink_status(ckdir, e)) &&
                         !fs::is_directory(fs::symlink_status(ckdir, e))) {
    throw std::invalid_argument(fmt::format(
        "--out: '{}' is {}: a run's checkpoints are written and pruned in a folder of its own; remove it, or pass "
        "--overwrite",
        excerpt(ckdir.string(), 200),
        fs::is_symlink(fs::symlink_status(ckdir, e)) ? "a symbolic link" : "not a folder"));
  }
  if (intent == DirIntent::kNew && !fs::exists(fs::symlink_status(out / "run.json"))) {
    // Files named like a run's, but no run: the user's, never taken for a run to continue.
    throw std::invalid_argument(fmt::format(
        "--out: '{}' holds files a run writes ('{}') but no run.json: not a run of this engine; choose another "
        "directory, or pass --overwrite to replace those files",
        excerpt(out.string(), 200), excerpt(run_files_in(out, inputs_).front().filename().string())));
  }
  if (intent == DirIntent::kNew) {
    throw std::invalid_argument(
        finished ? fmt::format("--out: '{}' already holds a finished run (metrics.jsonl); choose another directory, "
                                "or pass --overwrite to replace it", out.string())
                  : fmt::format("--out: '{}' holds an interrupted run; pass --resume auto to continue it from its "
                                "newest complete checkpoint, or --overwrite to discard it", out.string()));
  }
}

void RunDirectory::check_resume(const std::string& checkpoint_path, const std::string& checkpoint_run_id) {
  const bool own_file = same_file(checkpoint_path, out_ / "checkpoint.bin");
  if (holds_run_) {
    if (!dir_run_id_.empty() && !checkpoint_run_id.empty() && dir_run_id_ != checkpoint_run_id) {
      throw std::invalid_argument(fmt::format(
          "--resume: '{}' belongs to run {}, but '{}' holds run {}; resume into that run's directory, into an empty "
          "one, or pass --overwrite", checkpoint_path, checkpoint_run_id, out_.string(), dir_run_id_));
    }
    if ((dir_run_id_.empty() || checkpoint_run_id.empty()) && !own_file) {
      throw std::invalid_argument(fmt::format(
          "--resume: cannot tell whether '{}' belongs to the run in '{}' (written before run ids); resume from that "
          "directory's own checkpoint.bin, into an empty directory, or pass --overwrite", checkpoint_path,
          out_.string()));
    }
  }
  run_id_ = !checkpoint_run_id.empty() ? checkpoint_run_id : !dir_run_id_.empty() ? dir_run_id_ : new_run_id();
}

void RunDirectory::begin() {
  if (intent_ == DirIntent::kOverwrite && holds_run_) {
    for (const fs::path& f : run_files_in(out_, inputs_)) {  // a link is removed, not what it points to
      std::error_code ec;
      fs::remove_all(f, ec);  // the checkpoints folder with what it holds
      if (ec) throw std::runtime_error(fmt::format("--out: cannot remove '{}': {}", f.string(), ec.message()));
    }
    holds_run_ = false;
  }
  // The run's id, and who holds the directory now (the lock's holder text).
  Json run{{"run_id", run_id_}, {"stage", stage_}};
  run.update(holder_info());
  write_file_atomically(out_ / "run.json", json_text(run, 1) + "\n");
}

}  // namespace gpt2
