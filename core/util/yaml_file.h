// Reading a YAML file the user named, for the stage configurations
// (app/config_file.h) and the harness's experiment files: one clear error per
// mistake, naming the file (and line), where yaml-cpp would say
// "basic_filebuf::underflow" or keep a repeated key silently. A separate
// library (gpt2util_yaml): only what reads YAML links yaml-cpp.
#pragma once

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <string>

namespace gpt2 {

// The file's YAML. Throws std::invalid_argument "<file>: is a directory,
// expected <what>", "<file>: cannot read the <what>" or
// "<file>:<line>:<column>: YAML syntax error: ...".
YAML::Node load_yaml_file(const std::filesystem::path& file, const std::string& what);

// yaml-cpp keeps both entries of a repeated key and lookups see the first.
// Throws std::invalid_argument "<file>:<line>: duplicate key '<prefix><key>'
// (first at line N)" for a key repeated in the mapping `node`, and, with
// `nested`, in every mapping below it (there named without a prefix).
void refuse_duplicate_keys(const YAML::Node& node, const std::string& file, const std::string& prefix, bool nested);

}  // namespace gpt2
