// The commands that make or use weights without training (trainer.h):
// generate from a checkpoint, and init's initial weights.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "model/generate.h"
#include "parallel/process_grid.h"
#include "train/formats/checkpoint.h"
#include "train/formats/model_source.h"
#include "train/data/corpus.h"
#include "train/resolve/layout.h"
#include "train/run/run_state.h"
#include "train/run/trainer.h"
#include "util/console.h"
#include "util/fields.h"
#include "util/hash.h"

namespace gpt2 {

namespace {
// "tp=P:types" (a checkpoint's parallel.function) as a layout without its group.
TpPlace function_layout(const std::string& function, const std::string& path) {
  ParallelConfig p;
  const size_t colon = function.find(':');
  try {
    if (function.rfind("tp=", 0) != 0 || colon == std::string::npos) throw std::invalid_argument("");
    p.tp = static_cast<int>(parse_int64("parallel.tp", function.substr(3, colon - 3)));
    p.block_types = parse_name_list("parallel.block_types", function.substr(colon + 1));
    return TpPlace{p.tp, 0, p.blocks(), nullptr};
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(fmt::format("{}: parallel.function '{}' is not 'standard' or 'tp=P:types'", path,
                                            function));
  }
}

// The prompt: --prompt's text, else the first generate.prompt_tokens tokens
// of the first training shard or of the corpus.
std::vector<int32_t> generation_prompt(const GenerateRequest& req, const Checkpoint& ck) {
  const RunConfig& c = req.config;
  std::vector<int32_t> prompt;
  if (!req.prompt.empty()) {
    prompt = ck.tokenizer.encode(req.prompt, "--prompt");
  } else if (!c.data.shards.empty()) {  // the first training shard's first tokens
    const ShardSet shards = open_shards(c.data.shards, ck.tokenizer.size());
    prompt.resize(static_cast<size_t>(std::min<int64_t>(shards.train.size(), c.generate.prompt_tokens)));
    shards.train.read(0, prompt);
  } else {
    const std::string text = read_corpus(c.data.corpus);
    prompt = tokenize_corpus(ck.tokenizer, text, c.data.corpus);
    prompt.resize(std::min<size_t>(prompt.size(), static_cast<size_t>(c.generate.prompt_tokens)));
  }
  if (prompt.empty()) throw std::invalid_argument("--prompt: the prompt has no tokens");
  return prompt;
}

}  // namespace

void run_generate(const GenerateRequest& req, const ProgramContext& ctx) {
  const RunConfig& c = req.config;
  validate_with_split(c);
  if (req.checkpoint.empty()) throw std::invalid_argument("--checkpoint: a checkpoint file is required");
  // Rank 0 reads the checkpoint first: the function it was trained as decides
  // who generates. The standard function: rank 0 alone, on the full model.
  // spd or parallel blocks: the ranks of one tensor-parallel group, each on
  // its shard (every one of them reads the file).
  std::optional<Checkpoint> ck;
  std::vector<std::string> function{"standard"};
  const int rank = ctx.comm ? ctx.comm->rank() : 0;
  if (rank == 0) {
    ck = load_given_checkpoint(req.checkpoint);
    if (const std::string bad = non_finite_tensor(ck->config, ck->params); !bad.empty()) {
      throw std::invalid_argument(fmt::format("--checkpoint: '{}': {}; a model with non-finite weights cannot "
                                              "generate", req.checkpoint, bad));
    }
    if (const std::string* f = ck->find("parallel.function")) function[0] = *f;
  }
  if (ctx.comm) broadcast_strings(*ctx.comm, function, 0);
  TpPlace layout;
  std::unique_ptr<ProcessGrid> grid;
  if (function[0] != "standard") {
    layout = function_layout(function[0], req.checkpoint);
    if (ctx.comm == nullptr) {
      throw std::invalid_argument(fmt::format(
          "{}: trained as {} (spd/parallel blocks over {} tensor-parallel ranks: another function than the standard "
          "model); generate on the mpi or mpi_cuda stage with mpiexec -n {}", req.checkpoint, function[0],
          layout.size, layout.size));
    }
    grid = std::make_unique<ProcessGrid>(*ctx.comm, layout.size);
    if (grid->dp_comm().rank() != 0) {
      ctx.comm->barrier();
      return;
    }
    if (rank != 0) ck = load_given_checkpoint(req.checkpoint);
    if (!grid->tp_comm().all_equal(fnv1a64(ck->params.data(), ck->params.size() * sizeof(float)))) {
      throw std::runtime_error(fmt::format("{}: the ranks of the tensor-parallel group read different files",
                                           req.checkpoint));
    }
    layout = grid->layout(layout.blocks);
  } else if (rank != 0) {  // rank 0 generates alone; the others wait idle
    ctx.comm->barrier();
    return;
  }
  const std::vector<int32_t> prompt = generation_prompt(req, *ck);
  // As training cut them (train/resolve/layout.h).
  auto be = ctx.backend.make(
      backend_options(c, ck->config, resolve_threads(c.train.threads), ctx.comm ? ctx.comm->local_rank() : 0));
  layout.pieces = deterministic_pieces(ck->config, layout.size, *be);
  Gpt2 model(ck->config, be->memory(), layout);
  load_params(*ck, model);
  const auto g0 = std::chrono::steady_clock::now();
  GenerateConfig gen_cfg = c.generate;
  gen_cfg.vocab_limit = ck->tokenizer.size();
  // Printed as it is generated (rank 0): a long generation shows its text at once, not at the end.
  size_t printed = 0;
  const Generation gen = generate(*be, model, prompt, gen_cfg, ck->tokenizer.eos_id(), [&](int32_t t) {
    if (rank != 0) return;
    fmt::print("{}", ck->tokenizer.piece(t, printed++));
    std::fflush(stdout);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - g0).count();
  if (rank == 0) {
    fmt::print("\n");
    std::fflush(stdout);
    console::err(fmt::format("[{}] prompt of {} tokens; generated {} tokens in {:.3f} s{}{}\n", ctx.program,
                             prompt.size(), gen.tokens.size(), s, gen.stopped_at_eos ? " (stopped at [EOS])" : "",
                             layout.size > 1 ? fmt::format(" on {} tensor-parallel ranks", layout.size) : ""));
  }
  if (ctx.comm) ctx.comm->barrier();
}

void run_init(const InitRequest& req, const ProgramContext& ctx) {
  const RunConfig& c = req.config;
  validate_with_split(c);
  std::unique_ptr<Communicator> local;
  Communicator& comm = ctx.comm ? *ctx.comm : *(local = make_local_communicator());
  check_ranks_agree(c, comm);
  Corpus corpus = load_corpus(c.data, nullptr, comm);
  const Gpt2Config mc = resolve_vocab(c.model, corpus.tok.size());
  BackendOptions options = BackendOptions::with_threads(resolve_threads(c.train.threads));
  options.tf32 = c.train.tf32;
  options.device_hint = comm.local_rank();
  auto be = ctx.backend.make(options);
  Gpt2 model(mc, be->memory());
  model.init_weights(c.train.seed);
  const std::vector<float> w = model.params_to_host();  // back from the backend's memory
  const uint64_t hash = fnv1a64(w.data(), w.size() * sizeof(float));
  if (!comm.all_equal(hash)) throw std::runtime_error("the initial weights differ across ranks (checksum mismatch)");
  if (comm.rank() == 0) {
    save_checkpoint(req.out, mc, w, corpus.tok, nullptr, {{"train.seed", std::to_string(c.train.seed)}});
    console::err(fmt::format("[{}] initial weights (model.init {}, train.seed {}, {} parameters, hash {:016x}) in {}\n",
                             ctx.program, to_string(mc.init), c.train.seed, w.size(), hash, req.out));
  }
  comm.barrier();
}

}  // namespace gpt2
