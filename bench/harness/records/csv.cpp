// RFC 4180 CSV reading and writing for the harness (see csv.h).
#include "records/csv.h"

#include <fmt/format.h>

#include <stdexcept>

#include "util/files.h"

namespace gpt2::harness {

namespace {

std::string slurp(const std::filesystem::path& path) { return read_record_file(path, "", "a CSV file"); }

// A record and the line it starts on (records may span lines inside quotes).
struct Record {
  std::vector<std::string> fields;
  size_t line = 0;
};

std::vector<Record> parse(const std::string& text, const std::filesystem::path& path) {
  std::vector<Record> records;
  size_t i = 0, line = 1;
  const size_t n = text.size();
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) i = 3;  // UTF-8 byte-order mark
  auto fail = [&](size_t at_line, const std::string& what) {
    throw std::runtime_error(fmt::format("{}:{}: {}", path.string(), at_line, what));
  };
  while (i < n) {
    // An empty line (LF or CRLF) is no record.
    if (text[i] == '\n' || (text[i] == '\r' && i + 1 < n && text[i + 1] == '\n')) {
      i += text[i] == '\r' ? 2 : 1;
      ++line;
      continue;
    }
    Record rec;
    rec.line = line;
    bool end_of_record = false;
    while (!end_of_record) {
      std::string field;
      if (i < n && text[i] == '"') {
        const size_t open_line = line;
        ++i;
        for (;;) {
          if (i >= n) fail(open_line, "unterminated quoted field");
          char c = text[i];
          if (c == '"') {
            if (i + 1 < n && text[i + 1] == '"') {
              field += '"';
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          if (c == '\n') ++line;
          field += c;
          ++i;
        }
        if (i < n && text[i] != ',' && text[i] != '\n' && !(text[i] == '\r' && i + 1 < n && text[i + 1] == '\n')) {
          fail(line, fmt::format("unexpected character '{}' after a closing quote", text[i]));
        }
      } else {
        while (i < n && text[i] != ',' && text[i] != '\n' && !(text[i] == '\r' && i + 1 < n && text[i + 1] == '\n')) {
          if (text[i] == '"') fail(line, "quote inside an unquoted field (quote the whole field)");
          field += text[i++];
        }
      }
      rec.fields.push_back(std::move(field));
      if (i >= n) {
        end_of_record = true;
      } else if (text[i] == ',') {
        ++i;
      } else {  // LF or CRLF
        i += text[i] == '\r' ? 2 : 1;
        ++line;
        end_of_record = true;
      }
    }
    records.push_back(std::move(rec));
  }
  return records;
}

}  // namespace

CsvTable read_csv(const std::filesystem::path& path) {
  std::vector<Record> records = parse(slurp(path), path);
  if (records.empty()) throw std::runtime_error(fmt::format("{}: empty file, expected a header row", path.string()));
  const size_t width = records[0].fields.size();
  CsvTable table;
  table.reserve(records.size());
  for (Record& r : records) {
    if (r.fields.size() != width) {
      throw std::runtime_error(
          fmt::format("{}:{}: {} fields, but the header has {}", path.string(), r.line, r.fields.size(), width));
    }
    table.push_back(std::move(r.fields));
  }
  return table;
}

std::string csv_row(const std::vector<std::string>& fields) {
  std::string out;
  for (size_t k = 0; k < fields.size(); ++k) {
    if (k > 0) out += ',';
    const std::string& f = fields[k];
    if (f.find_first_of(",\"\r\n") == std::string::npos) {
      out += f;
      continue;
    }
    out += '"';
    for (char c : f) {
      if (c == '"') out += '"';
      out += c;
    }
    out += '"';
  }
  out += '\n';
  return out;
}

size_t column(const CsvTable& t, const std::string& name, const std::filesystem::path& path) {
  if (t.empty()) throw std::runtime_error(fmt::format("{}: no header row, expected column '{}'", path.string(), name));
  for (size_t k = 0; k < t[0].size(); ++k) {
    if (t[0][k] == name) return k;
  }
  throw std::runtime_error(fmt::format("{}:1: missing column '{}'", path.string(), name));
}

}  // namespace gpt2::harness
