// Machine files (machines/*.yaml, docs/prediction.md "The machine file"):
// what the step-time model knows of a machine, read and checked at the edge
// into a MachineModel (train/resolve/machine.h). `harness calibrate`
// writes them (bench/harness/runner/calibrate.cpp); tests/prediction_test.py
// reads its file back through `plan --machine`.
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

}  // namespace gpt2
