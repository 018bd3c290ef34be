// Precompiled for the harness library (meson's cpp_pch): the standard, fmt
// and JSON headers its files include, parsed once instead of once per file
// (the build's time, docs/testing.md). Only outside headers.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>
