#include "train/run_dir.h"

#include <fmt/format.h>

#include <fstream>
#include <random>
#include <stdexcept>
#include <system_error>

#include "util/json.h"

namespace gpt2 {

namespace fs = std::filesystem;

namespace {

// The files a run writes into its directory (and their temporaries).
const char* const kRunFiles[] = {"config.yaml",          "config.yaml.tmp",     "metrics.jsonl",
                                 "metrics.jsonl.partial", "checkpoint.bin",      "checkpoint.bin.tmp",
                                 "run.json",             "run.json.tmp",        "metrics.jsonl.partial.new"};

const fs::path& created(const fs::path& out) {
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw std::invalid_argument(fmt::format("--out: cannot create '{}': {}", out.string(), ec.message()));
  if (!fs::is_directory(out)) throw std::invalid_argument(fmt::format("--out: '{}' is not a directory", out.string()));
  return out;
}

std::string read_run_id(const fs::path& file) {
  std::ifstream f(file);
  if (!f) return "";
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  try {
    const Json j = Json::parse(text);
    if (j.contains("run_id") && j["run_id"].is_string()) return j["run_id"].get<std::string>();
  } catch (const Json::exception&) {
  }
  throw std::invalid_argument(fmt::format("--out: '{}' is not readable run information; remove the directory's "
                                          "run or pass --overwrite", file.string()));
}

// Same file (the user may name the directory's checkpoint by another path).
bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

}  // namespace

std::string new_run_id() {
  std::random_device rd;
  const uint64_t x = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("{:016x}", x);
}

RunDirectory::RunDirectory(const fs::path& out, DirIntent intent, const std::string& stage)
    : out_(out), stage_(stage), lock_(created(out), "--out", "run.json"), intent_(intent) {
  const fs::path probe = out / ".write-test";
  {
    std::ofstream f(probe);
    if (!f) throw std::invalid_argument(fmt::format("--out: '{}' is not writable", out.string()));
  }
  fs::remove(probe);
  for (const char* name : kRunFiles) holds_run_ = holds_run_ || fs::exists(out / name);
  const bool finished = fs::exists(out / "metrics.jsonl");
  dir_run_id_ = read_run_id(out / "run.json");
  run_id_ = new_run_id();  // a resumed run takes its checkpoint's instead (check_resume)
  if (!holds_run_) return;
  if (intent == DirIntent::kNew) {
    throw std::invalid_argument(
        finished ? fmt::format("--out: '{}' already holds a finished run (metrics.jsonl); choose another directory, "
                                "or pass --overwrite to replace it", out.string())
                  : fmt::format("--out: '{}' holds an interrupted run; pass --resume {} to continue it, or "
                                "--overwrite to discard it", out.string(), (out / "checkpoint.bin").string()));
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
    for (const char* name : kRunFiles) {
      std::error_code ec;
      fs::remove(out_ / name, ec);
      if (ec) throw std::runtime_error(fmt::format("--out: cannot remove '{}': {}", (out_ / name).string(), ec.message()));
    }
    holds_run_ = false;
  }
  // The run's id, and who holds the directory now (the lock's holder text).
  Json run{{"run_id", run_id_}, {"stage", stage_}};
  run.update(holder_info());
  write_file_atomically(out_ / "run.json", json_text(run, 1) + "\n");
}

}  // namespace gpt2
