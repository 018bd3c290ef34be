#include "app/cli.h"

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "app/config_file.h"
#include "app/machine_file.h"
#include "kernels/cpu/omp_wait.h"
#include "train/data/corpus.h"
#include "train/data/prepare.h"
#include "train/formats/convert.h"
#include "train/formats/sharded_checkpoint.h"
#include "train/resolve/plan.h"
#include "train/run/trainer.h"
#include "train/schedule/preemption.h"
#include "util/console.h"
#include "util/files.h"
#include "util/hash.h"

namespace gpt2 {

namespace {

// The options of each command beside the configuration keys: (name, value
// placeholder or "" for a flag, help).
struct Option {
  const char* name;
  const char* value;
  const char* help;
};

const std::vector<Option>& options(const std::string& command) {
  static const std::vector<Option> train = {
      {"config", "FILE", "YAML file of sections: model, data, train, optimizer, generate"},
      {"out", "DIR", "output directory [default: runs/<stage>-<UTC time>]"},
      {"resume", "CKPT", "continue the run of this training checkpoint (same curve as uninterrupted): in its own "
                         "DIR (its earlier metrics are kept) or in an empty one; a step folder DIR/checkpoints/step-N "
                         "is taken only when complete. auto: DIR's newest complete checkpoint, else a fresh start "
                         "(a new or empty DIR, or a run that wrote no checkpoint)"},
      {"overwrite", "", "discard the run DIR holds (finished or interrupted): its files are removed once this "
                        "run's input has been checked"},
      {"hostfile", "FILE", "MPI: fail unless the job's ranks fit this MPICH hostfile"}};
  static const std::vector<Option> generate = {
      {"checkpoint", "CKPT", "a checkpoint written by train (any stage)"},
      {"prompt", "TEXT", "prompt text [default: the first generate.prompt_tokens tokens of data.corpus]"},
      {"config", "FILE", "YAML file (for generate.*, train.threads and data.corpus)"}};
  static const std::vector<Option> evaluate = {
      {"model", "PATH", "the model (required): our checkpoint (model or training; a run's step folder), llm.c's model "
                        "file (fp32 or bf16) or a Hugging Face GPT-2 folder; its settings replace the model section"},
      {"data", "PATH", "a folder of token shards made by prepare, or a text file (read whole, tokenized with the "
                       "model's tokenizer): the mean loss and perplexity over it, on the configured layout"},
      {"split", "NAME", "--data's shards: val (the val_*.bin files) or train [default: val]"},
      {"batches", "N", "the first N batches of train.batch_size x train.seq_len tokens [default: every whole one]"},
      {"hellaswag", "FILE", "multiple choice in HellaSwag's JSON lines (ctx, endings, label): accuracy by each "
                            "ending's summed and mean token loss given the context (on rank 0, the whole model)"},
      {"details", "", "--hellaswag: list every example's label, predictions and per-ending losses"},
      {"config", "FILE", "YAML file (for data.*, train.* and parallel.*; its model section is not used)"}};
  static const std::vector<Option> config = {{"config", "FILE", "YAML file of sections to resolve"}};
  static const std::vector<Option> plan = {
      {"config", "FILE", "YAML file of sections: the run to plan"},
      {"ranks", "N", "the job's ranks (mpiexec -n N) [default: 1]"},
      {"stage", "NAME", "the stage program the run is for: serial, mpi, cuda or mpi_cuda [default: this one]"},
      {"machine", "FILE", "a machine file (machines/*.yaml, docs/prediction.md): add the step's predicted time"}};
  static const std::vector<Option> init = {{"out", "FILE", "the model checkpoint to write (required; not an existing "
                                                           "file, not in a run's folder)"},
                                           {"overwrite", "", "replace an existing --out file"},
                                           {"config", "FILE", "YAML file of sections: model, data, train"}};
  static const std::vector<Option> prepare = {
      {"input", "FILES", "text files, comma-separated: one document each (required)"},
      {"encoder_json", "FILE", "GPT-2's encoder.json (required; docs/tokenizer.md)"},
      {"vocab_bpe", "FILE", "GPT-2's vocab.bpe (required)"},
      {"out", "DIR", "the folder for train_NNNNNN.bin, val_NNNNNN.bin and manifest.json (required): absent or "
                     "empty"},
      {"overwrite", "", "replace the previous prepare's files in DIR (train_*.bin, val_*.bin, manifest.json); "
                        "nothing else there is touched"},
      {"shard_tokens", "N", "the most tokens a shard holds [default: 100000000]"},
      {"config", "FILE", "YAML file (for data.val_fraction and train.threads)"}};
  static const std::vector<Option> export_ = {
      {"checkpoint", "CKPT", "the checkpoint to export (required)"},
      {"format", "NAME", "llmc (llm.c's model file) or hf (model.safetensors + config.json for GPT2LMHeadModel) "
                         "[default: llmc]"},
      {"out", "PATH", "the file (llmc) or folder (hf) to write (required; not an existing one, not in a run's folder)"},
      {"overwrite", "", "replace an existing --out (a file, or the folder's model.safetensors and config.json)"}};
  static const std::vector<Option> import_ = {
      {"llmc", "FILE", "llm.c's model file (version 3, fp32, or 5, bf16) to import"},
      {"hf", "DIR", "a Hugging Face GPT-2 folder to import: config.json, model.safetensors (or an index and its "
                    "files; F32, F16 or BF16), and vocab.json + merges.txt (else data.encoder_json, data.vocab_bpe)"},
      {"out", "CKPT", "the model checkpoint to write (required; not an existing file, not in a run's folder)"},
      {"overwrite", "", "replace an existing --out file"},
      {"config", "FILE", "YAML file (for data.encoder_json and data.vocab_bpe: the tokenizer the checkpoint keeps)"}};
  static const std::vector<Option> checkpoint = {
      {"merge", "DIR", "a sharded checkpoint folder (train.checkpoint_format sharded: DIR/checkpoints/step-N, "
                       "taken only when complete) to write as one file"},
      {"split", "FILE", "a training checkpoint file to write as a sharded folder"},
      {"ranks", "N", "--split: the rank files to cut it into [default: 1]"},
      {"out", "PATH", "the file (--merge) or folder (--split) to write (required; not an existing one, not in a "
                      "run's folder)"},
      {"overwrite", "", "replace an existing --out"}};
  return command == "train"      ? train
         : command == "checkpoint" ? checkpoint
         : command == "export"   ? export_
         : command == "import"   ? import_
         : command == "generate" ? generate
         : command == "evaluate" ? evaluate
         : command == "init"     ? init
         : command == "plan"     ? plan
         : command == "prepare"  ? prepare
                                 : config;
}

const char* summary(const std::string& command) {
  if (command == "train") {
    return "trains from a YAML configuration (and overrides), writes DIR/config.yaml,\n"
           "DIR/metrics.jsonl (JSON lines, renamed into place when the run completes) and its training\n"
           "checkpoints, DIR/checkpoints/step-N/ (complete once their COMPLETE marker is written; the newest\n"
           "train.keep_checkpoints kept; DIR/checkpoint.bin is the newest), then generates from the first\n"
           "corpus tokens and prints the text. SIGTERM, SIGINT or SIGUSR1 (on any rank) stop it after the\n"
           "current step (or between micro-steps of a long one) with its checkpoint written: exit status 4,\n"
           "resume with --resume auto; a second signal ends it at once.";
  }
  if (command == "generate") return "continues a prompt with a trained checkpoint and prints the new text.";
  if (command == "evaluate") {
    return "measures a model (docs/formats.md): its mean loss and perplexity over token shards or a text file on\n"
           "any layout (the training step's forward, as the training loop's validation), and multiple-choice\n"
           "accuracy in HellaSwag's format. Prints one JSON object on stdout; writes nothing.";
  }
  if (command == "init") {
    return "writes the initial weights a run would start from (model.init from train.seed, the vocabulary\n"
           "from data.corpus) as a model checkpoint, computed in this stage's memory and checked equal on\n"
           "every rank: what compares initialisations across stages and against other implementations.";
  }
  if (command == "prepare") {
    return "tokenizes text files with GPT-2's BPE into llm.c token shards (docs/tokenizer.md): <|endoftext|>\n"
           "before each file's tokens, the last data.val_fraction of the tokens for validation, on train.threads\n"
           "threads (one a file at most); then DIR/manifest.json, last: training reads a folder through it.\n"
           "Prints a progress line and a summary (documents, tokens, vocabulary, shards).";
  }
  if (command == "export") {
    return "writes a checkpoint as llm.c's model file, or as safetensors with a config.json that Hugging Face's\n"
           "GPT2LMHeadModel loads (docs/formats.md); a model the format cannot hold is refused, naming the key.";
  }
  if (command == "import") {
    return "reads llm.c's model file (--llmc) or a Hugging Face GPT-2 folder (--hf) into a model checkpoint\n"
           "(GPT-2's block) with GPT-2's tokenizer: the folder's vocab.json and merges.txt, else data.encoder_json\n"
           "and data.vocab_bpe (docs/formats.md). Start training from it with train.init_from.";
  }
  if (command == "checkpoint") {
    return "converts a training checkpoint between the two formats (docs/formats.md): --merge writes a sharded\n"
           "folder as one file (what export, generate and older programs read), --split a file as a sharded\n"
           "folder that any layout resumes. Every rank file's checksum is verified first.";
  }
  if (command == "plan") {
    return "prints, as JSON (docs/plan.md), what each of the job's N ranks would hold and do: its grid\n"
           "coordinates, its memory by kind, its groups' communication per step, the step's FLOPs; or the\n"
           "refusal a run would give (then also on stderr, exit status 2). Reads data.corpus (the vocabulary);\n"
           "allocates and runs nothing. With --machine, also the step's predicted time (docs/prediction.md).";
  }
  return "prints the resolved configuration (every key, as YAML) after the file and the overrides,\n"
         "or the first error in it: what a run would be given, without running it.";
}

std::string usage(const std::string& stage) {
  return fmt::format(
      "usage: {0} train    [--config FILE] [--out DIR] [--resume CKPT] [--overwrite] [--hostfile FILE]\n"
      "                [--KEY VALUE ...]\n"
      "       {0} generate --checkpoint CKPT [--prompt TEXT] [--config FILE] [--KEY VALUE ...]\n"
      "       {0} evaluate --model PATH [--data PATH [--split val|train] [--batches N]] [--hellaswag FILE\n"
      "                [--details]] [--config FILE] [--KEY VALUE ...]\n"
      "       {0} config   [--config FILE] [--KEY VALUE ...]\n"
      "       {0} init     --out FILE [--overwrite] [--config FILE] [--KEY VALUE ...]\n"
      "       {0} plan     [--config FILE] [--ranks N] [--stage NAME] [--machine FILE] [--KEY VALUE ...]\n"
      "       {0} prepare  --input FILES --encoder_json FILE --vocab_bpe FILE --out DIR [--shard_tokens N]\n"
      "                [--overwrite] [--config FILE] [--KEY VALUE ...]\n"
      "       {0} export   --checkpoint CKPT [--format llmc|hf] --out PATH [--overwrite]\n"
      "       {0} import   (--llmc FILE | --hf DIR) --out CKPT [--overwrite] [--config FILE] [--KEY VALUE ...]\n"
      "       {0} checkpoint (--merge DIR | --split FILE [--ranks N]) --out PATH [--overwrite]\n"
      "       {0} [train|generate|evaluate|config|init|plan|prepare|export|import|checkpoint] --help\n",
      stage);
}

std::string help(const std::string& stage, const std::string& note, const std::string& command) {
  std::string h = fmt::format("{}: the {} stage of the GPT-2 engine.\n\n{}", stage, stage, usage(stage));
  if (!note.empty()) h += "\n" + note;
  for (const char* cmd :
       {"train", "generate", "evaluate", "config", "init", "plan", "prepare", "export", "import", "checkpoint"}) {
    if (!command.empty() && command != cmd) continue;
    h += fmt::format("\n{}: {}\n", cmd, summary(cmd));
    for (const Option& o : options(cmd)) {
      h += fmt::format("  --{:<24} {}\n", fmt::format("{} {}", o.name, o.value), o.help);
    }
  }
  RunConfig defaults;
  h += "\nconfiguration keys (--KEY VALUE or --KEY=VALUE) [type: default]:\n";
  h += command == "generate"   ? run_fields(defaults).help({"data", "train", "generate"})
       : command == "evaluate" ? run_fields(defaults).help({"data", "train", "parallel"})
                               : run_fields(defaults).help({"model", "data", "train", "optimizer", "generate", "parallel"});
  return h;
}

// An option's count >= 1 (--ranks, --batches), at most `max`.
int64_t parse_count(const std::string& option, const std::string& text, int64_t max = INT64_MAX) {
  size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || n < 1 || n > max) {
    throw std::invalid_argument(fmt::format("--{}: '{}' is not a count >= 1{}", option, text,
                                            max < INT64_MAX ? fmt::format(" (at most {})", max) : ""));
  }
  return n;
}

int parse_ranks(const std::string& text) { return static_cast<int>(parse_count("ranks", text, INT32_MAX)); }

std::string default_out_dir(const std::string& stage) {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::gmtime(&now));
  return fmt::format("runs/{}-{}", stage, buf);
}

// generate reads only data.*, train.* and generate.* (its --help lists no
// others): the checkpoint defines the model, and nothing is trained. A
// command-line override of another key would be silently ignored, so it is
// refused. Its --config file may hold every section (the training file).
// evaluate likewise reads data.*, train.* and parallel.* (the layout it evaluates on).
void refuse_unused_keys(const std::string& command, const CommandLine& cl) {
  const bool generate = command == "generate";
  for (const auto& [key, value] : cl.settings) {
    const std::string section = key.substr(0, key.find('.'));
    if (!generate && (key == "data.corpus" || key == "data.shards" || key == "data.val_fraction" ||
                      key == "data.loader" || key == "data.tokenizer")) {
      throw std::invalid_argument(fmt::format("--{}: evaluate reads the tokens --data names (in order), with "
                                              "--model's tokenizer; this key has no effect", key));
    }
    if (section == "data" || section == "train" || section == (generate ? "generate" : "parallel")) continue;
    throw std::invalid_argument(fmt::format(
        "--{}: {}; this key has no effect", key,
        section == "model" ? (generate ? "generate takes the model from the checkpoint" : "evaluate takes the model from --model")
                           : fmt::format("{} does not train", command)));
  }
}

// Collective: every rank of the job must have been started with one command
// and the same options (mpiexec's MPMD form can give ranks different ones:
// `train` on one and `generate` on another, or --resume on one rank only,
// would each wait in a different collective forever). Every rank throws the
// same error, naming the ranks that differ from rank 0 and rank 0's command.
void check_command_lines_agree(const std::vector<std::string>& args, Communicator& comm) {
  std::string text;
  for (const std::string& a : args) text += a + '\0';
  const std::optional<std::string> root_text = root_text_if_ranks_differ(comm, text);
  if (!root_text) return;
  const std::string& root = *root_text;
  const float differs = root == text ? 0.0f : 1.0f;
  std::vector<float> all(static_cast<size_t>(comm.size()));
  comm.all_gather(&differs, all.data(), 1);
  std::string ranks;
  for (int r = 0; r < comm.size(); ++r) {
    if (all[static_cast<size_t>(r)] != 0.0f) ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", r);
  }
  std::string shown;  // rank 0's command and the options it was given
  for (size_t at = 0; at < root.size();) {
    const size_t end = root.find('\0', at);
    if (end > at) {
      if (!shown.empty()) shown += ' ';
      shown.append(root, at, end - at);
    }
    at = end + 1;
  }
  throw std::invalid_argument(fmt::format(
      "the ranks were started with different commands or options: rank(s) {} differ from rank 0's '{}'; start "
      "every rank with one command line (mpiexec -n N program ARGS)", ranks.empty() ? "?" : ranks, shown));
}

// The plan command: the plan as JSON on stdout, or the refusal as JSON on
// stdout and thrown (stderr, exit status 2) as a run would refuse it.
void print_plan(const RunConfig& cfg, const std::string& ranks_text, const std::string& stage,
                const std::string& machine_file, bool root) {
  int ranks = 1;
  try {
    if (!ranks_text.empty()) ranks = parse_ranks(ranks_text);
    std::optional<MachineModel> machine;
    if (!machine_file.empty()) machine = read_machine_file(machine_file);
    const Json plan = plan_json(plan_run(cfg, ranks, stage, machine ? &*machine : nullptr));
    if (root) fmt::print("{}\n", plan.dump(1));
  } catch (const std::invalid_argument& e) {
    if (root) fmt::print("{}\n", refusal_json(stage, ranks, e.what()).dump(1));
    throw;
  }
}

// The options a command was given, read by name ("" for one not given).
struct Given {
  const CommandLine& cl;
  std::string get(const char* key) const {
    const std::string* v = cl.find(key);
    return v ? *v : std::string();
  }
  bool flag(const char* name) const { return cl.find(name) != nullptr; }
};

// The command and its options as every rank was given them, compared across
// the job's ranks (the configuration keys are compared key by key later,
// check_ranks_agree, with a message naming the key).
void check_options_agree(const std::string& command, const CommandLine& cl, Communicator& comm) {
  std::vector<std::string> given = {command};
  for (const Option& o : options(command)) {
    const std::string* v = cl.find(o.name);
    given.push_back(v ? fmt::format("--{} {}", o.name, *v) : "");
    // The hostfile every rank reads itself: its content must agree too (one path may name
    // different files on different hosts; a --config's resolved keys are compared one by one
    // later, naming the key). An unreadable one is left to the reader's own error.
    if (v && std::string(o.name) == "hostfile") {
      try {
        const std::string text = read_input_file(*v, kMaxTextInputBytes, "", "a file");
        given.push_back(fmt::format("(content {:016x})", fnv1a64(text.data(), text.size())));
      } catch (const std::exception&) {
        given.push_back("");
      }
    }
  }
  given.push_back(cl.help ? "--help" : "");
  check_command_lines_agree(given, comm);
}

void refuse_several_processes(const std::string& command, const ProgramContext& ctx) {
  if (ctx.comm && ctx.comm->size() > 1) {
    throw std::invalid_argument(fmt::format("{} runs on one process (the serial stage)", command));
  }
}

void run_prepare(const Given& g, const RunConfig& cfg, const ProgramContext& ctx) {
  refuse_several_processes("prepare", ctx);
  PrepareRequest req;
  const std::string inputs = g.get("input");
  size_t at = 0;
  for (size_t comma; (comma = inputs.find(',', at)) != std::string::npos; at = comma + 1) {
    if (comma > at) req.inputs.push_back(inputs.substr(at, comma - at));
  }
  if (at < inputs.size()) req.inputs.push_back(inputs.substr(at));
  req.encoder_json = g.get("encoder_json");
  req.vocab_bpe = g.get("vocab_bpe");
  req.out_dir = g.get("out");
  req.overwrite = g.flag("overwrite");
  req.val_fraction = cfg.data.val_fraction;
  req.threads = resolve_threads(cfg.train.threads);
  if (const std::string n = g.get("shard_tokens"); !n.empty()) {
    req.shard_tokens = static_cast<uint64_t>(parse_count("shard_tokens", n));
  }
  const PrepareSummary sum = prepare_shards(req);
  fmt::print("prepared {} documents ({:.2f} MB): {} training and {} validation tokens, vocabulary {}, {:.2f} "
             "MB/s on {} threads; {} shards and manifest.json in {}\n",
             sum.documents, static_cast<double>(sum.bytes) / 1e6, sum.train_tokens, sum.val_tokens, sum.vocab,
             sum.seconds > 0 ? static_cast<double>(sum.bytes) / 1e6 / sum.seconds : 0.0, sum.threads,
             sum.shards.size(), req.out_dir);
}

void run_import(const Given& g, const RunConfig& cfg, const ProgramContext& ctx) {
  refuse_several_processes("import", ctx);
  const bool llmc = !g.get("llmc").empty(), hf = !g.get("hf").empty();
  if (llmc == hf) throw std::invalid_argument("import: give one of --llmc FILE and --hf DIR");
  if (hf) {
    fmt::print("{}\n", import_hf(g.get("hf"), cfg.data.encoder_json, cfg.data.vocab_bpe, g.get("out"), g.flag("overwrite")));
    return;
  }
  if (cfg.data.encoder_json.empty() || cfg.data.vocab_bpe.empty()) {
    throw std::invalid_argument("data.encoder_json and data.vocab_bpe: import keeps GPT-2's tokenizer in the "
                                "checkpoint; give its two files (docs/tokenizer.md)");
  }
  fmt::print("{}\n", import_llmc(g.get("llmc"), cfg.data.encoder_json, cfg.data.vocab_bpe, g.get("out"),
                                  g.flag("overwrite")));
}

void run_checkpoint_command(const Given& g, const ProgramContext& ctx) {
  refuse_several_processes("checkpoint", ctx);
  const bool merge = !g.get("merge").empty(), split = !g.get("split").empty();
  if (merge == split) throw std::invalid_argument("checkpoint: give one of --merge DIR and --split FILE");
  if (merge) {
    if (!g.get("ranks").empty()) throw std::invalid_argument("--ranks: only with --split");
    fmt::print("{}\n", merge_checkpoint(g.get("merge"), g.get("out"), g.flag("overwrite")));
    return;
  }
  const int ranks = g.get("ranks").empty() ? 1 : parse_ranks(g.get("ranks"));
  fmt::print("{}\n", split_checkpoint(g.get("split"), ranks, g.get("out"), g.flag("overwrite")));
}

void run_init_command(const Given& g, const RunConfig& cfg, const ProgramContext& ctx) {
  if (g.get("out").empty()) throw std::invalid_argument("--out: the checkpoint file to write is required");
  // Every file init reads is an input; rank 0 writes, so rank 0 checks (a refusal there ends the job).
  OutputRules rules{"--out", {}, g.flag("overwrite"), false};
  for (const std::string& in : {g.get("config"), cfg.data.corpus, cfg.data.encoder_json, cfg.data.vocab_bpe}) {
    if (!in.empty()) rules.inputs.emplace_back(in);
  }
  if (ctx.comm == nullptr || ctx.comm->rank() == 0) check_output(g.get("out"), rules);
  run_init(InitRequest{cfg, g.get("out")}, ctx);
}

// The command, its configuration resolved (the file, then the overrides).
void dispatch(const std::string& command, const Given& g, const RunConfig& cfg, const ProgramContext& ctx) {
  const bool root = ctx.comm == nullptr || ctx.comm->rank() == 0;
  if (command == "config") {
    validate_with_split(cfg);  // as a run's first checks (train/resolve/layout.h)
    if (root) fmt::print("{}", to_yaml(cfg));
  } else if (command == "plan") {
    print_plan(cfg, g.get("ranks"), g.get("stage").empty() ? ctx.program : g.get("stage"), g.get("machine"), root);
  } else if (command == "prepare") {
    run_prepare(g, cfg, ctx);
  } else if (command == "export") {
    refuse_several_processes("export", ctx);
    fmt::print("{}\n", export_checkpoint(g.get("checkpoint"), g.get("format").empty() ? "llmc" : g.get("format"),
                                          g.get("out"), g.flag("overwrite")));
  } else if (command == "import") {
    run_import(g, cfg, ctx);
  } else if (command == "checkpoint") {
    run_checkpoint_command(g, ctx);
  } else if (command == "init") {
    run_init_command(g, cfg, ctx);
  } else if (command == "evaluate") {
    run_evaluate(EvaluateRequest{cfg, g.get("model"), g.get("data"), g.get("split"), g.get("batches").empty() ? 0 : parse_count("batches", g.get("batches")),
                                 g.get("hellaswag"), g.flag("details")},
                 ctx);
  } else if (command == "train") {
    const std::string out = g.get("out").empty() ? default_out_dir(ctx.program) : g.get("out");
    const TrainRequest req{cfg, out, g.get("resume"), g.flag("overwrite"), g.get("config"), g.get("hostfile")};
    run_train(req, ctx);
    if (root) console::err(fmt::format("[{}] results in {}\n", ctx.program, req.out_dir));
  } else {
    // GenerateRequest's "" means "no prompt: take it from the corpus"; one
    // given empty on purpose is a mistake, not a request for the corpus.
    if (const std::string* p = g.cl.find("prompt"); p && p->empty()) {
      throw std::invalid_argument("--prompt: empty prompt (leave --prompt out to start from the corpus)");
    }
    run_generate(GenerateRequest{cfg, g.get("checkpoint"), g.get("prompt")}, ctx);
  }
}

int run(int argc, char** argv, const ProgramContext& ctx, const std::string& note) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    throw std::invalid_argument(
        "no command given (expected train, generate, evaluate, config, init, plan, prepare, export, import or "
        "checkpoint; see --help)");
  }
  const bool root = ctx.comm == nullptr || ctx.comm->rank() == 0;
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    if (root) fmt::print("{}", help(ctx.program, note, ""));
    return 0;
  }
  const std::string command = args[0];
  if (command != "train" && command != "generate" && command != "evaluate" && command != "config" &&
      command != "init" && command != "plan" && command != "prepare" && command != "export" && command != "import" &&
      command != "checkpoint") {
    throw std::invalid_argument(fmt::format("unknown command '{}' (expected train, generate, evaluate, config, init, "
                                            "plan, prepare, export, import or checkpoint)",
                                            command));
  }
  std::vector<std::string> keys, flags;
  for (const Option& o : options(command)) (*o.value ? keys : flags).push_back(o.name);
  RunConfig cfg;
  const Fields fields = run_fields(cfg);
  const CommandLine cl = parse_command_line({args.begin() + 1, args.end()}, fields, keys, flags);
  if (ctx.comm) check_options_agree(command, cl, *ctx.comm);
  if (cl.help) {
    if (root) fmt::print("{}", help(ctx.program, note, command));
    return 0;
  }
  if (!cl.positional.empty()) throw std::invalid_argument(fmt::format("unexpected argument '{}'", cl.positional[0]));
  const Given g{cl};
  if (command == "generate" || command == "evaluate") refuse_unused_keys(command, cl);
  if (!g.get("config").empty()) load_yaml(cfg, g.get("config"));
  apply_settings(fields, cl);
  dispatch(command, g, cfg, ctx);
  return 0;
}

// Reports an error once and ends the job. With several ranks, an error every
// rank meets (bad configuration) is printed by rank 0 alone: the other ranks
// wait a moment for rank 0's abort to end them. An error only one rank meets
// is printed by that rank, which then ends every rank.
int fail(const ProgramContext& ctx, const char* what, int code) {
  Communicator* comm = ctx.comm;
  if (comm && comm->size() > 1 && comm->rank() != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  console::err(fmt::format("{}: error: {}{}\n", ctx.program,
                           comm && comm->size() > 1 ? fmt::format("rank {}: ", comm->rank()) : "", what));
  console::drain(console::kExitStall);
  if (comm && comm->size() > 1) {
    // Give mpiexec's proxy time to forward the message before the abort
    // tears the job down (seen here: without the pause it was sometimes lost).
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    comm->abort(code);
  }
  return code;
}

}  // namespace

namespace {

int tool_status(const char* program, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const BackendUnavailable& e) {
    console::err(fmt::format("{}: {}\n", program, e.what()));
    return kExitUnavailable;
  } catch (const std::invalid_argument& e) {  // bad input: options, configuration, files
    console::err(fmt::format("{}: error: {}\n", program, e.what()));
    return kExitUsage;
  } catch (const std::exception& e) {  // the measurement itself failed, as a stage's run does
    console::err(fmt::format("{}: error: {}\n", program, e.what()));
    return kExitFailure;
  }
}

}  // namespace

int tool_main(const char* program, int (*run)(int, char**), int argc, char** argv) {
  cpu::set_omp_wait_policy(argv);
  const int status = tool_status(program, run, argc, argv);
  console::drain(console::kExitStall);  // lines the core said through the console (its progress, notes)
  return status;
}

int stage_main_error(const ProgramContext& ctx, const char* what, int code) { return fail(ctx, what, code); }

namespace {

int stage_status(int argc, char** argv, const ProgramContext& ctx, const std::string& help_note) {
  try {
    ProgramContext hooked = ctx;  // the tests' hooks for a training run, installed only when the environment names them
    const bool trains = argc > 1 && std::string(argv[1]) == "train";
    if (const char* text = std::getenv(kTestHooksVariable); text && trains) hooked.hooks = parse_test_hooks(text);
    return run(argc, argv, hooked, help_note);
  } catch (const RunPreempted& e) {  // every rank stopped after the same step, its work written: no abort
    // Rank 0 alone exits with the status. MPICH 4.0's mpiexec can report 0 when several ranks exit non-zero
    // at once (its cleanup resets their statuses: pmodels/mpich#7057, fixed in later releases); with one
    // non-zero rank it reports that rank's status.
    if (ctx.comm == nullptr || ctx.comm->rank() == 0) {
      console::err(fmt::format("{}: preempted: {}\n", ctx.program, e.what()));
    }
    return kExitPreempted;
  } catch (const BackendUnavailable& e) {
    return fail(ctx, e.what(), kExitUnavailable);
  } catch (const std::invalid_argument& e) {
    return fail(ctx, e.what(), kExitUsage);
  } catch (const std::exception& e) {
    return fail(ctx, e.what(), kExitFailure);
  }
}

}  // namespace

int stage_main(int argc, char** argv, const ProgramContext& ctx, const std::string& help_note) {
  // A reader that closed its end of stdout or stderr (a launcher gone, `| head`)
  // costs the console's lines, not the run: the console sees EPIPE and drops
  // them (util/console.h) where SIGPIPE would end the process, results unwritten.
  std::signal(SIGPIPE, SIG_IGN);
  const int status = stage_status(argc, argv, ctx, help_note);
  // What the console still holds goes out while the streams take it (a stalled
  // one is given up after kExitStall, its lines counted as dropped).
  console::drain(console::kExitStall);
  return status;
}

}  // namespace gpt2
