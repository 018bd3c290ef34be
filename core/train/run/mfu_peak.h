// The MFU denominator when none is configured: the best matrix-product rate
// ever measured on this machine for this layout, not just the one measured
// at start-up. A start-up SGEMM that ran while the machine was busy reads low
// (and an MFU over 100% follows); keeping the best measurement per machine,
// backend and layout in a small cache file means one idle start-up fixes the
// peak for every later run. The cache is a convenience: when it cannot be
// read or written the run goes on with this start-up's measurement.
#pragma once

#include <string>

namespace gpt2 {

struct MfuPeak {
  double gflops = 0;
  std::string source;  // for the log and the provenance
};

// The cache file: $GPT2_CACHE_DIR/mfu_peak.json, else
// $XDG_CACHE_HOME/gpt2-engine/..., else $HOME/.cache/gpt2-engine/...; "" if
// none of them is set.
std::string mfu_peak_cache_path();

// max(measured, the best recorded for `key`), recording `measured` when it is
// the new best. `key` names the machine and the layout (host, CPU, kernel
// library, backend, ranks x threads).
// `what` names the product measured in the source text ("SGEMM", "bf16 product").
MfuPeak best_known_peak(const std::string& key, double measured, const std::string& what = "SGEMM");

}  // namespace gpt2
