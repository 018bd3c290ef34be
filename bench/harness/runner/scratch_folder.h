// A private scratch folder: made by mkdtemp under TMPDIR (else /tmp), so its
// name is new and nobody's to guess (a link planted at a predictable name
// would redirect the writes), and removed with what is in it however the
// command ends (a refusal, an error, success).
#pragma once

#include <fmt/format.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace gpt2::harness {

class ScratchFolder {
 public:
  // `prefix`: the folder's name before mkdtemp's six characters ("harness_compare_").
  explicit ScratchFolder(const std::string& prefix) {
    std::string name = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
    if (::mkdtemp(name.data()) == nullptr) {
      throw std::runtime_error(fmt::format("cannot make a scratch folder '{}': {}", name, std::strerror(errno)));
    }
    path_ = name;
  }
  ~ScratchFolder() {
    std::error_code ec;  // a destructor cannot fail: what cannot be removed stays (in TMPDIR)
    std::filesystem::remove_all(path_, ec);
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace gpt2::harness
