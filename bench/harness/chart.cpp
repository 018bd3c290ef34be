// gnuplot charts for the reports (see chart.h).
#include "chart.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>

#include "util/files.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

std::optional<std::string> find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (!path) return std::nullopt;
  const std::string dirs = path;
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";  // empty entry: "."
    const std::string candidate = fmt::format("{}/{}", dir, name);
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    start = end + 1;
  }
  return std::nullopt;
}

// Runs `gnuplot -e "out='<name>.svg.tmp'" <name>.gp` in `dir` with its output
// discarded. Returns the exit status, or -1 if it could not be run.
int run_gnuplot(const std::string& gnuplot, const fs::path& dir, const std::string& name) {
  // Everything the child needs is made before fork: after it, only
  // async-signal-safe calls until exec.
  const std::string dir_s = dir.string(), out_arg = fmt::format("out='{}.svg.tmp'", name), script = name + ".gp";
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    const int null_fd = ::open("/dev/null", O_RDWR);
    if (null_fd < 0 || ::chdir(dir_s.c_str()) != 0) ::_exit(127);
    ::dup2(null_fd, 0);
    ::dup2(null_fd, 1);
    ::dup2(null_fd, 2);
    ::execl(gnuplot.c_str(), "gnuplot", "-e", out_arg.c_str(), script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

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
  const auto gnuplot = find_on_path("gnuplot");
  if (!gnuplot) return "(plot not drawn: gnuplot not available)\n";
  const int rc = run_gnuplot(*gnuplot, dir, name);
  if (rc == 0 && fs::file_size(tmp, ec) > 0 && !ec && std::rename(tmp.c_str(), svg.c_str()) == 0) {
    written.push_back(svg);
    return fmt::format("![{}]({}.svg)\n", title, name);
  }
  fs::remove(tmp, ec);
  return fmt::format("(plot not drawn: gnuplot failed with status {}; run `gnuplot {}.gp` here to see why)\n", rc,
                     name);
}

}  // namespace gpt2::harness
