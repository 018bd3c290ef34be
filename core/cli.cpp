#include "cli.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpt2 {

namespace {

std::string usage(const std::string& stage) {
  return fmt::format(
      "usage: {0} train    [--config FILE] [--out DIR] [--resume CKPT] [--overwrite] [--hostfile FILE]\n"
      "                [--KEY VALUE ...]\n"
      "       {0} generate --checkpoint CKPT [--prompt TEXT] [--config FILE] [--KEY VALUE ...]\n"
      "       {0} [train|generate] --help\n",
      stage);
}

std::string help(const StageContext& ctx, const std::string& command) {
  const std::string& stage = ctx.stage;
  std::string h = fmt::format("{}: the {} stage of the GPT-2 engine.\n\n{}", stage, stage, usage(stage));
  if (!ctx.help_note.empty()) h += "\n" + ctx.help_note;
  if (command != "generate") {
    h += fmt::format(
        "\ntrain: trains from a YAML configuration (and overrides), writes DIR/config.yaml,\n"
        "DIR/metrics.jsonl (JSON lines, renamed into place when the run completes) and\n"
        "DIR/checkpoint.bin, then generates from the first corpus tokens and prints the text.\n"
        "  --config FILE              YAML file of sections: model, data, train, optimizer, generate\n"
        "  --out DIR                  output directory [default: runs/{}-<UTC time>]\n"
        "  --resume CKPT              continue from a training checkpoint (same curve as uninterrupted)\n"
        "  --overwrite                allow DIR to hold a finished run (its files are replaced as the\n"
        "                             new run writes them; its metrics stream only when the new one ends)\n"
        "  --hostfile FILE            MPI: fail unless the job's ranks fit this MPICH hostfile\n",
        stage);
  }
  if (command != "train") {
    h += "\ngenerate: continues a prompt with a trained checkpoint and prints the new text.\n"
         "  --checkpoint CKPT          a checkpoint written by train (any stage)\n"
         "  --prompt TEXT              prompt text [default: the first generate.prompt_tokens\n"
         "                             tokens of data.corpus]\n";
  }
  h += "\nconfiguration keys (--KEY VALUE or --KEY=VALUE) [type: default]:\n";
  h += command == "generate" ? fields_help({"data", "train", "generate"})
                             : fields_help({"model", "data", "train", "optimizer", "generate"});
  return h;
}

std::string default_out_dir(const std::string& stage) {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::gmtime(&now));
  return fmt::format("runs/{}-{}", stage, buf);
}

int run(int argc, char** argv, const StageContext& ctx) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) throw std::invalid_argument("no command given (expected train or generate; see --help)");
  const bool root = ctx.comm == nullptr || ctx.comm->rank() == 0;
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    if (root) fmt::print("{}", help(ctx, ""));
    return 0;
  }
  const std::string command = args[0];
  if (command != "train" && command != "generate") {
    throw std::invalid_argument(fmt::format("unknown command '{}' (expected train or generate)", command));
  }
  std::string config_file, out_dir, resume, checkpoint, prompt, hostfile;
  bool overwrite = false;
  std::vector<std::pair<std::string, std::string>> overrides;
  for (size_t i = 1; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "--help" || a == "-h") {
      if (root) fmt::print("{}", help(ctx, command));
      return 0;
    }
    if (a.rfind("--", 0) != 0) throw std::invalid_argument(fmt::format("unexpected argument '{}'", a));
    std::string key = a.substr(2), value;
    const size_t eq = key.find('=');
    const bool flag = key == "overwrite";
    if (eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else if (!flag) {
      if (i + 1 >= args.size()) throw std::invalid_argument(fmt::format("--{}: missing value", key));
      value = args[++i];
    }
    if (key == "config") config_file = value;
    else if (key == "out" && command == "train") out_dir = value;
    else if (key == "resume" && command == "train") resume = value;
    else if (key == "hostfile" && command == "train") hostfile = value;
    else if (flag && command == "train") overwrite = true;
    else if (key == "checkpoint" && command == "generate") checkpoint = value;
    else if (key == "prompt" && command == "generate") prompt = value;
    else if (key.find('.') != std::string::npos) overrides.emplace_back(key, value);
    else throw std::invalid_argument(fmt::format("unknown option '--{}' for {} (see {} {} --help)", key, command,
                                                 ctx.stage, command));
  }
  RunConfig cfg;
  if (!config_file.empty()) load_yaml(cfg, config_file);
  for (const auto& [key, value] : overrides) set_field(cfg, key, value, "command line");

  if (command == "train") {
    TrainRequest req{cfg, out_dir.empty() ? default_out_dir(ctx.stage) : out_dir, resume, overwrite, config_file,
                     hostfile};
    run_train(req, ctx);
    if (root) fmt::print(stderr, "[{}] results in {}\n", ctx.stage, req.out_dir);
  } else {
    run_generate(GenerateRequest{cfg, checkpoint, prompt}, ctx);
  }
  return 0;
}

}  // namespace

namespace {
// Reports an error once and ends the job. With several ranks, an error every
// rank meets (bad configuration) is printed by rank 0 alone: the other ranks
// wait a moment for rank 0's abort to end them. An error only one rank meets
// is printed by that rank, which then ends every rank.
int fail(const StageContext& ctx, const char* what, int code) {
  Communicator* comm = ctx.comm;
  if (comm && comm->size() > 1 && comm->rank() != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  fmt::print(stderr, "{}: error: {}{}\n", ctx.stage,
             comm && comm->size() > 1 ? fmt::format("rank {}: ", comm->rank()) : "", what);
  std::fflush(stderr);
  if (comm && comm->size() > 1) {
    // Give mpiexec's proxy time to forward the message before the abort
    // tears the job down (seen here: without the pause it was sometimes lost).
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    comm->abort(code);
  }
  return code;
}
}  // namespace

int tool_main(const char* program, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const BackendUnavailable& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return kExitUnavailable;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: error: {}\n", program, e.what());
    return kExitUsage;
  }
}

int stage_main_error(const StageContext& ctx, const char* what, int code) { return fail(ctx, what, code); }

int stage_main(int argc, char** argv, const StageContext& ctx) {
  try {
    return run(argc, argv, ctx);
  } catch (const BackendUnavailable& e) {
    return fail(ctx, e.what(), kExitUnavailable);
  } catch (const std::invalid_argument& e) {
    return fail(ctx, e.what(), kExitUsage);
  } catch (const std::exception& e) {
    return fail(ctx, e.what(), kExitFailure);
  }
}

}  // namespace gpt2
