// Number formats and Markdown for the reports (see report_format.h).
#include "render/report_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "util/files.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

std::string exact(std::optional<double> x) { return x ? fmt::format("{}", *x) : ""; }

std::string sig3(double x) {
  if (x == 0) return "0";
  const int digits = static_cast<int>(std::floor(std::log10(std::fabs(x))));
  return fmt::format("{:.{}f}", x, std::max(0, 2 - digits));
}
std::string sig3(std::optional<double> x) { return x ? sig3(*x) : ""; }

int seconds_decimals(double x) {
  return std::fabs(x) >= 0.1 || x == 0 ? 2 : 2 - static_cast<int>(std::floor(std::log10(std::fabs(x))));
}
std::string seconds(double x) { return fmt::format("{:.{}f}", x, seconds_decimals(x)); }
std::string seconds(std::optional<double> x) { return x ? seconds(*x) : ""; }

std::string rate(std::optional<double> x) {
  return !x ? "" : std::fabs(*x) >= 100 ? fmt::format("{:.0f}", *x) : sig3(*x);
}
std::string loss4(std::optional<double> x) { return x ? fmt::format("{:.4f}", *x) : ""; }
std::string percent(std::optional<double> x) { return x ? fmt::format("{:.1f}%", 100 * *x) : ""; }

std::string median_range(const std::optional<Summary>& s) {
  if (!s) return "";
  if (s->n == 1) return seconds(s->median);
  const int d = seconds_decimals(s->median);  // one precision for all three
  return fmt::format("{:.{}f} [{:.{}f}–{:.{}f}]", s->median, d, s->min, d, s->max, d);
}

namespace {

std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c == '\n' || c == '\r' ? ' ' : c);
  return out;
}

}  // namespace

std::string md_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                     const std::string& align) {
  std::string out = "|";
  for (const std::string& h : header) out += fmt::format(" {} |", md_cell(h));
  out += "\n|";
  for (size_t k = 0; k < header.size(); ++k) out += k < align.size() && align[k] == 'r' ? "---:|" : "---|";
  out += '\n';
  for (const auto& row : rows) {
    out += '|';
    for (const std::string& cell : row) out += fmt::format(" {} |", md_cell(cell));
    out += '\n';
  }
  return out;
}

std::string joined(const std::string& lead, const std::vector<std::string>& items) {
  if (items.empty()) return "";
  std::string out = lead;
  for (size_t k = 0; k < items.size(); ++k) out += (k ? "; " : "") + items[k];
  return out + ".\n\n";
}

std::string reproduce_block(const std::string& command) {
  return fmt::format("Reproduce with:\n\n```sh\n{}\n```\n\n", command);
}

void write_report(const fs::path& path, const std::string& text, std::vector<fs::path>& written) {
  write_file_atomically(path, text);
  written.push_back(path);
}

void make_reports_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(fmt::format("{}: cannot create the reports folder: {}", dir.string(), ec.message()));
}

}  // namespace gpt2::harness
