// What Slurm accepts of the values a job script takes (see slurm_options.h).
#include "runner/slurm_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <regex>
#include <stdexcept>
#include <string_view>

#include "runner/yaml_reader.h"
#include "util/text.h"

namespace gpt2::harness {

namespace {

// sbatch's long options (`sbatch --help` of Slurm 22.05, and sbatch(1) for
// those it does not list). Only whole names are taken: sbatch reads #SBATCH
// lines with getopt_long, which takes any unambiguous abbreviation, so
// "--wr" would be --wrap.
// clang-format off
const std::vector<std::string> kSbatchOptions = {
    "account", "acctg-freq", "array", "batch", "bb", "bbf", "begin", "chdir", "cluster-constraint", "clusters",
    "comment", "constraint", "container", "contiguous", "core-spec", "cores-per-socket", "cpu-freq", "cpus-per-gpu",
    "cpus-per-task", "deadline", "delay-boot", "dependency", "distribution", "error", "exclude", "exclusive",
    "export", "export-file", "extra-node-info", "get-user-env", "gid", "gpu-bind", "gpu-freq", "gpus",
    "gpus-per-node", "gpus-per-socket", "gpus-per-task", "gres", "gres-flags", "help", "hint", "hold", "ignore-pbs",
    "input", "job-name", "kill-on-invalid-dep", "licenses", "mail-type", "mail-user", "mcs-label", "mem", "mem-bind",
    "mem-per-cpu", "mem-per-gpu", "mincpus", "network", "nice", "no-kill", "no-requeue", "nodefile", "nodelist",
    "nodes", "ntasks", "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-node", "ntasks-per-socket", "open-mode",
    "output", "overcommit", "oversubscribe", "parsable", "partition", "power", "priority", "profile", "propagate",
    "qos", "quiet", "reboot", "requeue", "reservation", "signal", "sockets-per-node", "spread-job", "switches",
    "test-only", "thread-spec", "threads-per-core", "time", "time-min", "tmp", "uid", "usage", "use-min-nodes",
    "verbose", "version", "wait", "wait-all-nodes", "wckey", "wrap"};

// Its short options, by the long option each stands for.
const std::map<char, std::string> kSbatchShort = {
    {'a', "array"},     {'A', "account"},   {'b', "begin"},      {'B', "extra-node-info"}, {'c', "cpus-per-task"},
    {'C', "constraint"}, {'d', "dependency"}, {'D', "chdir"},    {'e', "error"},           {'F', "nodefile"},
    {'G', "gpus"},      {'h', "help"},      {'H', "hold"},       {'i', "input"},           {'J', "job-name"},
    {'k', "no-kill"},   {'L', "licenses"},  {'m', "distribution"}, {'M', "clusters"},      {'n', "ntasks"},
    {'N', "nodes"},     {'o', "output"},    {'O', "overcommit"}, {'p', "partition"},       {'q', "qos"},
    {'Q', "quiet"},     {'s', "oversubscribe"}, {'S', "core-spec"}, {'t', "time"},         {'v', "verbose"},
    {'V', "version"},   {'w', "nodelist"},  {'W', "wait"},       {'x', "exclude"}};
// clang-format on

// The options refused, and why: each would undo what the job script does
// for the harness, or do what an experiment file must not.
std::string refusal(const std::string& name) {
  static const std::map<std::string, std::string> kWhy = {
      {"job-name", "the job script sets it from the run"},
      {"ntasks", "the job script asks for the run's ranks"},
      {"cpus-per-task", "the job script asks for the run's threads"},
      {"output", "the job's output goes to the run's log.txt, which the harness reads"},
      {"error", "the job's output goes to the run's log.txt, which the harness reads"},
      {"open-mode", "the job's output goes to the run's log.txt, which the harness reads"},
      {"requeue", "the job script asks to be requeued, and requeues itself after a stop"},
      {"no-requeue", "the job script asks to be requeued, and requeues itself after a stop"},
      {"signal", "the job script asks for it (slurm.signal_s)"},
      {"time", "give it as --time (slurm.time)"},
      {"partition", "give it as --partition (slurm.partition)"},
      {"account", "give it as --account (slurm.account)"},
      {"wrap", "it runs a command of its own"},
      {"export", "it sets the job's environment, which the job's shell reads (BASH_ENV names a file it runs)"},
      {"export-file", "it sets the job's environment, which the job's shell reads (BASH_ENV names a file it runs)"},
      {"get-user-env", "it sets the job's environment, which the job's shell reads (BASH_ENV names a file it runs)"},
      {"uid", "it runs the job as another user"},
      {"gid", "it runs the job as another group"},
      {"array", "each run is one job"},
      {"hold", "the harness waits for the job to end"},
      {"parsable", "the harness submits the job and waits for it itself"},
      {"wait", "the harness submits the job and waits for it itself"},
      {"test-only", "the harness submits the job and waits for it itself"},
      {"help", "it is not a job's option"},
      {"usage", "it is not a job's option"},
      {"version", "it is not a job's option"}};
  const auto it = kWhy.find(name);
  return it == kWhy.end() ? "" : it->second;
}

// The characters an option's value may hold: none that sbatch's reading of
// an #SBATCH line (white space, quotes, '\', '#') or a shell treats specially.
bool value_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("_.,:=@%/+-").find(c) != std::string::npos;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string slurm_name_problem(const std::string& value, const std::string& what) {
  if (is_plain_name(value)) return "";
  return fmt::format(
      "'{}' is not {} name: one name of letters, digits, '_', '-' and '.', not starting with '.' or "
      "'-', at most 100 characters",
      excerpt(value), what);
}

std::string slurm_time_problem(const std::string& value) {
  // sbatch(1), --time: minutes, minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes,
  // days-hours:minutes:seconds; "UNLIMITED" or "INFINITE" for none.
  static const std::regex kForm(R"(\d{1,9}(:\d{1,9}){0,2}|\d{1,9}-\d{1,9}(:\d{1,9}){0,2})");
  if (value.size() <= 40 &&
      (std::regex_match(value, kForm) || upper(value) == "UNLIMITED" || upper(value) == "INFINITE")) {
    return "";
  }
  return fmt::format(
      "'{}' is not a Slurm time limit (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, "
      "UNLIMITED or INFINITE)",
      excerpt(value));
}

std::string sbatch_option_problem(const std::string& option) {
  const auto refuse = [&](const std::string& why) { return fmt::format("'{}' {}", excerpt(option), why); };
  if (option.size() > 200) return refuse("is longer than 200 characters");
  std::string name, value;
  bool has_value = false;
  if (option.starts_with("--")) {
    const size_t end = option.find_first_of("= ", 2);
    name = option.substr(2, end == std::string::npos ? std::string::npos : end - 2);
    has_value = end != std::string::npos;
    if (has_value) value = option.substr(end + 1);
  } else if (option.size() >= 2 && option[0] == '-' && kSbatchShort.count(option[1]) > 0 &&
             (option.size() == 2 || option[2] == ' ')) {
    name = kSbatchShort.at(option[1]);
    has_value = option.size() > 2;
    if (has_value) value = option.substr(3);
  }
  if (name.empty()) return refuse("is not an sbatch option (--name, --name=value, --name value, -X or -X value)");
  if (std::find(kSbatchOptions.begin(), kSbatchOptions.end(), name) == kSbatchOptions.end()) {
    std::string longer;  // an abbreviation: the options it could stand for
    for (const std::string& known : kSbatchOptions) {
      if (known.starts_with(name)) longer += (longer.empty() ? "--" : ", --") + known;
    }
    return refuse(longer.empty() ? fmt::format("is not an sbatch option{}", did_you_mean(name, kSbatchOptions))
                                 : fmt::format("is not an sbatch option: give the whole name ({})", longer));
  }
  if (const std::string why = refusal(name); !why.empty()) return refuse(fmt::format("is not taken: {}", why));
  if (has_value && (value.empty() || !std::all_of(value.begin(), value.end(), value_char))) {
    return refuse("has a value that is empty or holds characters other than letters, digits and _ . , : = @ % / + -");
  }
  return "";
}

void check_slurm_values(const SlurmOptions& o) {
  const auto check = [](const std::string& option, const std::string& problem) {
    if (!problem.empty()) throw std::invalid_argument(fmt::format("{}: {}", option, problem));
  };
  if (!o.partition.empty()) check("--partition", slurm_name_problem(o.partition, "a partition"));
  if (!o.account.empty()) check("--account", slurm_name_problem(o.account, "an account"));
  if (!o.time.empty()) check("--time", slurm_time_problem(o.time));
  for (const std::string& s : o.sbatch) check("--sbatch", sbatch_option_problem(s));
}

std::string sbatch_path(const std::filesystem::path& path, const std::string& what) {
  const std::string text = path.string();
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == '\\') {
      throw std::invalid_argument(fmt::format(
          "{}: '{}' holds {}, which an #SBATCH line cannot carry; choose a path without control characters or "
          "backslashes",
          what, excerpt(text, 200), c == '\\' ? "a backslash" : "a control character"));
    }
  }
  std::string word = "\"";
  for (char c : text) {
    if (c == '%') {
      word += "%%";  // Slurm's file name pattern: "%%" is one '%', a lone one starts a replacement (%j)
    } else if (c == '"' || c == '\'' || c == '#') {
      word += '\\';  // sbatch's reading of the line: an escaped character is taken as it is
      word += c;
    } else {
      word += c;
    }
  }
  return word + "\"";
}

}  // namespace gpt2::harness
