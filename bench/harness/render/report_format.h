// What every report of the harness writes the same way: number formats,
// Markdown tables, the atomic write of a report file, and the reproduce
// block. Formats only; which numbers a report shows is the report's.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "util/stats.h"

namespace gpt2::harness {

// Full precision (shortest round trip) for the CSV outputs; "" for no value.
std::string exact(std::optional<double> x);
// Three significant digits without an exponent: 1388, 9.09, 0.00123.
std::string sig3(double x);
std::string sig3(std::optional<double> x);
// Seconds: two decimals from 0.1 s up; below, enough decimals for three significant digits.
int seconds_decimals(double x);
std::string seconds(double x);
std::string seconds(std::optional<double> x);
// A rate: whole numbers from 100 up, else three significant digits.
std::string rate(std::optional<double> x);
// A loss: four decimals.
std::string loss4(std::optional<double> x);
// A fraction as a percentage with one decimal: 0.123 -> "12.3%".
std::string percent(std::optional<double> x);
// "median [min–max]" in seconds, or only the median for a single value.
std::string median_range(const std::optional<Summary>& s);

// A Markdown table; `align` holds 'l' or 'r' per column. Cells have '|'
// escaped and line breaks flattened.
std::string md_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                     const std::string& align);
// "<lead>a; b; c.\n\n", or nothing for an empty list.
std::string joined(const std::string& lead, const std::vector<std::string>& items);
// "Reproduce with:" and the command as a shell block.
std::string reproduce_block(const std::string& command);

// Writes `text` atomically and appends `path` to `written`.
void write_report(const std::filesystem::path& path, const std::string& text,
                  std::vector<std::filesystem::path>& written);
// Creates the reports folder; throws std::runtime_error naming it.
void make_reports_dir(const std::filesystem::path& dir);

}  // namespace gpt2::harness
