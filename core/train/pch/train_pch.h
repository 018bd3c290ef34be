// Precompiled for the train library (meson's cpp_pch): core_pch.h's
// headers and nlohmann's JSON, which most of its files read or write
// (run records, plans, checkpoint indexes). Only outside headers.
#pragma once

#include <nlohmann/json.hpp>

#include "util/pch/core_pch.h"
