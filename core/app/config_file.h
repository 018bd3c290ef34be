// Configuration files: a YAML mapping of sections (model, data, train,
// optimizer, generate, parallel) read into a RunConfig (train/config/run_config.h)
// through its field list. Errors name the file, the line and the key, with a
// "did you mean" hint for unknown keys and sections. Relative data.corpus
// paths are resolved against the file's directory.
#pragma once

#include <string>

#include "train/config/run_config.h"

namespace gpt2 {

void load_yaml(RunConfig& c, const std::string& path);

}  // namespace gpt2
