// The arrays file of the exporters (export_reference, export_tp): arrays
// written back to back into DIR/data.bin, and the manifest's table of them
// (name, dtype, shape, byte offset) for DIR/manifest.json.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

class Writer {
 public:
  explicit Writer(const std::string& path) : f_(std::fopen(path.c_str(), "wb")) {
    if (!f_) throw std::runtime_error(fmt::format("cannot write {}", path));
  }
  ~Writer() { std::fclose(f_); }
  template <typename X>
  void add(const std::string& name, const X* data, std::vector<int64_t> shape, const char* dtype) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    std::fwrite(data, sizeof(X), n, f_);
    std::string dims;
    for (int64_t d : shape) dims += fmt::format("{}{}", dims.empty() ? "" : ", ", d);
    entries_ += fmt::format("{}    {{\"name\": \"{}\", \"dtype\": \"{}\", \"shape\": [{}], \"offset\": {}}}",
                            entries_.empty() ? "" : ",\n", name, dtype, dims, offset_);
    offset_ += n * sizeof(X);
  }
  const std::string& entries() const { return entries_; }

 private:
  std::FILE* f_;
  std::string entries_;
  size_t offset_ = 0;
};

}  // namespace
