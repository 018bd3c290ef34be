// gnuplot charts for the reports (see chart.h).
#include "render/chart.h"

#include <fmt/format.h>

#include <cstdio>
#include <set>

#include "runner/process.h"
#include "util/files.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

std::string gnuplot_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string line_chart_data(const std::string& x_name, const std::vector<Series>& series) {
  std::set<double> xs;
  for (const Series& s : series) {
    for (const auto& [x, y] : s.points) xs.insert(x);
  }
  std::string out = fmt::format("# {}", x_name);
  for (const Series& s : series) out += fmt::format(" {}", gnuplot_string(s.title));
  out += '\n';
  for (double x : xs) {
    out += fmt::format("{}", x);
    for (const Series& s : series) {
      auto it = s.points.find(x);
      out += it == s.points.end() ? " NaN" : fmt::format(" {}", it->second);
    }
    out += '\n';
  }
  return out;
}

std::string line_chart_plot(const std::string& name, const std::vector<Series>& series, const std::string& style) {
  std::string out = "plot ";
  for (size_t k = 0; k < series.size(); ++k) {
    out +=
        fmt::format("{}\"{}.dat\" using 1:{} with {} lw {} dt {} title {}", k ? ", \\\n     " : "", name, k + 2, style,
                    series[k].dashed ? "1.5" : "2", series[k].dashed ? 2 : 1, gnuplot_string(series[k].title));
  }
  return out + "\n";
}

std::string draw_chart(const fs::path& dir, const std::string& name, const std::string& title, const std::string& data,
                       const std::string& commands, std::vector<fs::path>& written) {
  // `out` can be set from the command line, so the harness draws into a
  // temporary file and renames it, while `gnuplot <name>.gp` by hand still works.
  const std::string script = fmt::format(
      "# {}. Redraw with `gnuplot {}.gp` in this folder.\n"
      "if (!exists(\"out\")) out = \"{}.svg\"\n"
      "set terminal svg size 800,500 dynamic enhanced\n"
      "set output out\n"
      "set datafile missing \"NaN\"\n"
      "set key noenhanced\n"
      "set grid\n"
      "{}",
      title, name, name, commands);
  for (const auto& [file, text] : {std::pair(dir / (name + ".dat"), data), std::pair(dir / (name + ".gp"), script)}) {
    write_file_atomically(file, text);
    written.push_back(file);
  }
  const fs::path svg = dir / (name + ".svg"), tmp = dir / (name + ".svg.tmp");
  std::error_code ec;
  fs::remove(svg, ec);  // a chart left from earlier data would contradict the new numbers
  const std::string gnuplot = find_on_path("gnuplot");
  if (gnuplot.empty()) return "(plot not drawn: gnuplot not available)\n";
  // In `dir`, where the script finds its .dat file; its output is of no use.
  LaunchOptions opt;
  opt.timeout_s = 120;
  opt.cwd = dir;
  const int rc = launch({gnuplot, "-e", fmt::format("out='{}.svg.tmp'", name), name + ".gp"}, "/dev/null", opt);
  if (rc == 0 && fs::file_size(tmp, ec) > 0 && !ec && std::rename(tmp.c_str(), svg.c_str()) == 0) {
    written.push_back(svg);
    return fmt::format("![{}]({}.svg)\n", title, name);
  }
  fs::remove(tmp, ec);
  return fmt::format("(plot not drawn: gnuplot failed with status {}; run `gnuplot {}.gp` here to see why)\n", rc,
                     name);
}

std::string step_chart(const std::filesystem::path& dir, const std::string& name, const std::string& title,
                       const std::vector<Series>& series, const std::string& ylabel, const std::string& style,
                       std::vector<std::filesystem::path>& written) {
  if (series.empty()) return fmt::format("(plot {} not drawn: no {} in loss.csv)\n\n", name, ylabel);
  const std::string body = fmt::format("set title {}\nset xlabel \"step\"\nset ylabel {}\nset key top right\n",
                                       gnuplot_string(title), gnuplot_string(ylabel)) +
                           line_chart_plot(name, series, style);
  return draw_chart(dir, name, title, line_chart_data("step", series), body, written) + "\n";
}

}  // namespace gpt2::harness
