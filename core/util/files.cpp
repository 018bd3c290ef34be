#include "util/files.h"

#include <fmt/format.h>

#include <fstream>
#include <stdexcept>

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

}  // namespace gpt2
