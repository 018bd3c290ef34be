// CSV files of the experiment harness (runs.csv, loss.csv, the paper's
// tables, the reports' own tables): RFC 4180 reading and writing. Fields are
// plain strings; turning them into numbers is the caller's job. Not a
// general-purpose CSV library: no dialects, no type inference, no streaming.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace gpt2::harness {

using CsvTable = std::vector<std::vector<std::string>>;  // row 0 = header

// Reads a whole CSV file. Accepts LF or CRLF line ends, a UTF-8 byte-order
// mark and a missing final newline; skips empty lines. Throws
// std::runtime_error "<path>:<line>: ..." on malformed input (unterminated
// quote, text after a closing quote, a quote inside an unquoted field, a row
// whose width differs from the header's) and "<path>: ..." when the file
// cannot be read or is empty.
CsvTable read_csv(const std::filesystem::path& path);

// One CSV record ending in '\n'. A field holding a comma, quote, CR or LF is
// quoted, with its quotes doubled (RFC 4180).
std::string csv_row(const std::vector<std::string>& fields);

// Index of the header column `name`; throws std::runtime_error naming the
// file (`path`, used only for the message) and the missing column.
size_t column(const CsvTable& t, const std::string& name, const std::filesystem::path& path);

}  // namespace gpt2::harness
