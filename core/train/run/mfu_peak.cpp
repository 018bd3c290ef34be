#include "train/run/mfu_peak.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "util/json.h"
#include "util/files.h"

namespace gpt2 {

namespace fs = std::filesystem;

std::string mfu_peak_cache_path() {
  return engine_cache_file("mfu_peak.json");
}

MfuPeak best_known_peak(const std::string& key, double measured, const std::string& what) {
  MfuPeak p{measured, "measured " + what};
  const std::string path = mfu_peak_cache_path();
  if (path.empty()) return p;
  Json cache = Json::object();
  try {  // through the bounded reader: a FIFO or a device planted there is skipped, not waited on
    cache = Json::parse(read_input_file(path, kMaxTextInputBytes, "", "the SGEMM peak cache"));
    if (!cache.is_object()) cache = Json::object();
  } catch (const std::exception&) {
    cache = Json::object();  // missing or unreadable: started again
  }
  const auto it = cache.find(key);
  if (it != cache.end() && it->is_number() && it->get<double>() > measured) {
    p.gflops = it->get<double>();
    p.source = fmt::format("best {} measured on this machine ({:.1f} now; {})", what, measured, path);
    return p;
  }
  cache[key] = round_fixed(measured, 2);
  try {
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    // A fresh exclusive temporary renamed into place: runs starting at once each write a whole file.
    write_file_atomically(path, json_text(cache, 1) + "\n");
    p.source = fmt::format("measured {}, the best on this machine so far ({})", what, path);
  } catch (const std::exception&) {
    // The cache is a convenience; the measurement stands.
  }
  return p;
}

}  // namespace gpt2
