// Small file helpers shared by the trainer and the harness.
#pragma once

#include <filesystem>
#include <string>

namespace gpt2 {

// Writes `text` to "<path>.tmp" and renames it over `path`: readers see the
// old file or the new one, never a half-written one.
void write_file_atomically(const std::filesystem::path& path, const std::string& text);

}  // namespace gpt2
