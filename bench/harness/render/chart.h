// Charts of the harness's reports, drawn by gnuplot: each chart is
// <name>.dat (the numbers), <name>.gp (the script, which can be rerun by
// hand) and <name>.svg where gnuplot is on PATH. Just enough for the reports'
// bar and line charts; not a plotting library.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace gpt2::harness {

// One line of a line chart: y by x.
struct Series {
  std::string title;
  std::map<double, double> points;
  bool dashed = false;
};

// The data file of a line chart: a comment line naming the columns, then one
// row per x over the union of the series' x values, "NaN" where a series has
// no point.
std::string line_chart_data(const std::string& x_name, const std::vector<Series>& series);

// The gnuplot `plot` command that draws every series of <name>.dat (as written
// by line_chart_data) with `style` ("lines", "linespoints"); dashed series thinner.
std::string line_chart_plot(const std::string& name, const std::vector<Series>& series, const std::string& style);

// `s` as a gnuplot double-quoted string.
std::string gnuplot_string(const std::string& s);

// Writes <name>.dat (`data`) and <name>.gp (SVG terminal set-up, then
// `commands`) into `dir`, and draws <name>.svg when gnuplot is on PATH; every
// file is written atomically and appended to `written`. Returns the Markdown
// that shows the chart, or "(plot not drawn: ...)" saying why; a missing or
// failing gnuplot never throws.
std::string draw_chart(const std::filesystem::path& dir, const std::string& name, const std::string& title,
                       const std::string& data, const std::string& commands,
                       std::vector<std::filesystem::path>& written);

// A line chart of curves by step (loss curves): <name> drawn with `style`,
// titled `title`, the y axis `ylabel`; or, with no series, the line saying
// it was not drawn. Markdown, ending in a blank line.
std::string step_chart(const std::filesystem::path& dir, const std::string& name, const std::string& title,
                       const std::vector<Series>& series, const std::string& ylabel, const std::string& style,
                       std::vector<std::filesystem::path>& written);

}  // namespace gpt2::harness
