// Precompiled for the core libraries (meson's cpp_pch, force-included in
// each of a library's files): the standard and fmt headers most of them
// include, parsed once per library instead of once per file (the build's
// time, docs/testing.md). Only outside headers: every source still
// includes what it uses, and tests/layering_test.py reads the sources.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
