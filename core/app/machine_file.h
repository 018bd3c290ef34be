// Machine files (machines/*.yaml, docs/prediction.md "The machine file"):
// what the step-time model knows of a machine, read and checked at the edge
// into a MachineModel (train/resolve/machine.h), and written by `harness
// calibrate`.
#pragma once

#include <filesystem>
#include <string>

#include "train/resolve/machine.h"

namespace gpt2 {

inline constexpr const char* kMachineSchema = "gpt2-machine/1";

// Throws std::invalid_argument naming the file and the key for anything
// missing, unknown, of the wrong type or out of range: every figure finite,
// times and bandwidths positive, every op one the op table costs, shapes
// within the model's limits.
MachineModel read_machine_file(const std::filesystem::path& file);

// The machine file's text for `m` (read_machine_file reads it back equal).
std::string machine_yaml(const MachineModel& m);

}  // namespace gpt2
