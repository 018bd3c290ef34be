// Reading a run's plan.json (see run_plan.h).
#include "records/run_plan.h"

#include <fmt/format.h>

#include <stdexcept>

#include "util/files.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

std::optional<Json> read_plan(const fs::path& run_dir) {
  const fs::path file = run_dir / "plan.json";
  if (!fs::exists(file)) return std::nullopt;
  Json j = Json::parse(read_record_file(file, "", "a run's plan"), nullptr, false);
  if (!j.is_object() || !j.value("ok", false) || !j.contains("per_rank") || !j["per_rank"].is_array() ||
      j["per_rank"].empty() || !j.contains("layout")) {
    throw std::runtime_error(fmt::format("{}: not a run's plan (docs/plan.md)", file.string()));
  }
  return j;
}

}  // namespace gpt2::harness
