// `harness compare A B`: two result sets of stage runs matched configuration
// by configuration (stage, ranks, threads, layout): the median of a metric
// over each side's completed repetitions, the ratio B / A, and a Mann-Whitney
// U test over the repetitions (util/stats.h), with compare.py's warnings
// when there are too few. A side is a results folder holding runs.csv, an
// experiment name (results/<name>), or REV:NAME, that experiment's runs.csv
// as commit REV holds it (git show). Markdown on stdout; with --out, also
// compare.md and compare.csv there.
#pragma once

#include <filesystem>
#include <string>

namespace gpt2::harness {

struct CompareRequest {
  std::string a, b;                   // as given
  std::string metric = "training_s";  // a numeric column of runs.csv
  std::filesystem::path repo;         // the repository (results/, git)
  std::filesystem::path results;      // the results folder names resolve in
  std::filesystem::path out;          // "" = stdout only
  bool overwrite = false;             // `out` may be an existing folder (compare.md, compare.csv replaced)
};

// Returns the Markdown. Throws std::invalid_argument for a side that names
// nothing, an unknown metric, two sides with no configuration in common, or
// an `out` that util/files.h's check_output refuses (checked first, before
// any side is read: an existing folder without `overwrite`, a file, a side's
// runs.csv or folder, a run's folder, a folder another process holds).
std::string compare_results(const CompareRequest& req);

}  // namespace gpt2::harness
