#include "train/run/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <thread>

#include "parallel/gradient_sync.h"
#include "parallel/process_grid.h"
#include "model/activations.h"
#include "model/flops.h"
#include "train/run/run_state.h"
#include "train/schedule/pipeline.h"
#include "train/schedule/train_step.h"
#include "util/console.h"
#include "util/provenance.h"
#include "train/data/corpus.h"
#include "train/evaluate/multiple_choice.h"
#include "train/formats/model_source.h"
#include "train/resolve/layout.h"
#include "train/run/build.h"
#include "util/fields.h"
#include "util/files.h"

namespace gpt2 {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

namespace {

// What rank 0 read for evaluate, before any work: the model file, its
// tokenizer (or GPT-2's from data.*), and the multiple-choice examples.
struct EvaluateInputs {
  std::optional<ModelWeights> weights;
  std::optional<Tokenizer> tok;
  std::vector<ChoiceExample> examples;
};

// Rank 0 reads --model (and --hellaswag); every rank takes the model's
// settings and its tokenizer's kind into `c`, or throws rank 0's refusal.
EvaluateInputs read_evaluate_inputs(const EvaluateRequest& req, RunConfig& c, Communicator& comm) {
  EvaluateInputs in;
  std::vector<std::string> d = {""};  // the refusal, then the tokenizer's kind, then the model's keys and values
  if (comm.rank() == 0) {
    try {
      in.weights = read_model_weights(req.model, "--model");
      if (in.weights->tokenizer) {
        in.tok = *in.weights->tokenizer;
      } else {
        if (c.data.encoder_json.empty() || c.data.vocab_bpe.empty()) {
          throw std::invalid_argument(fmt::format("--model: '{}' keeps no tokenizer: give GPT-2's files as "
                                                  "data.encoder_json and data.vocab_bpe (docs/tokenizer.md)",
                                                  req.model));
        }
        in.tok = Tokenizer::gpt2(load_bpe_tokenizer(c.data.encoder_json, c.data.vocab_bpe));
      }
      const Gpt2Config model = resolve_vocab(in.weights->config, in.tok->size());
      if (!req.hellaswag.empty()) in.examples = read_choice_examples(req.hellaswag, *in.tok, model.T);
      d.push_back(to_string(in.tok->kind()));
      Gpt2Config copy = in.weights->config;
      Fields f;
      f.add_section("model", copy);
      for (const auto& [k, v] : f.values()) {
        d.push_back(k);
        d.push_back(v);
      }
    } catch (const std::invalid_argument& e) {
      d = {e.what()};
    }
  }
  broadcast_strings(comm, d, 0);
  if (!d[0].empty()) throw std::invalid_argument(d[0]);
  c.data.tokenizer = parse_tokenizer_kind(d[1]);
  Fields f;
  f.add_section("model", c.model);
  for (size_t i = 2; i + 1 < d.size(); i += 2) f.set(d[i], d[i + 1], "--model");
  return in;
}

// Multiple-choice scoring on rank 0 with the whole model (train/evaluate/multiple_choice.h).
Json score_multiple_choice(const EvaluateRequest& req, const RunConfig& c, const EvaluateInputs& in,
                           const ProgramContext& ctx, int threads) {
  const Gpt2Config mc = resolve_vocab(c.model, in.tok->size());
  auto be = ctx.backend.make(backend_options(c, mc, threads, ctx.comm ? ctx.comm->local_rank() : 0));
  Gpt2 model(mc, be->memory());
  model.params_from_host(fit_weights(*in.weights, mc, "--model", req.model));
  // One forward per example: a row per ending, padded with [EOS] to the longest row of the file.
  size_t rows = 0, T = 0;
  for (const ChoiceExample& ex : in.examples) {
    rows = std::max(rows, ex.endings.size());
    for (const auto& e : ex.endings) T = std::max(T, ex.context.size() + e.size() - 1);
  }
  ActivationArena arena(model, static_cast<int>(rows), static_cast<int>(T));
  std::vector<int32_t> x(rows * T), y(rows * T);
  std::vector<float> losses(rows * T);
  int64_t correct = 0, correct_norm = 0;
  Json details = Json::array();
  const auto t0 = Clock::now();
  for (size_t i = 0; i < in.examples.size(); ++i) {
    const ChoiceExample& ex = in.examples[i];
    std::fill(x.begin(), x.end(), in.tok->eos_id());
    std::fill(y.begin(), y.end(), in.tok->eos_id());
    for (size_t e = 0; e < ex.endings.size(); ++e) {
      const ChoiceRow r = choice_row(ex, e);
      std::copy(r.inputs.begin(), r.inputs.end(), x.begin() + static_cast<std::ptrdiff_t>(e * T));
      std::copy(r.targets.begin(), r.targets.end(), y.begin() + static_cast<std::ptrdiff_t>(e * T));
    }
    gpt2_forward(*be, model, arena.acts(), x.data(), y.data());
    be->memory().download(losses.data(), arena.acts().losses.data, losses.size() * sizeof(float));
    std::vector<std::vector<float>> per_ending;
    for (size_t e = 0; e < ex.endings.size(); ++e) {
      per_ending.emplace_back(losses.begin() + static_cast<std::ptrdiff_t>(e * T),
                              losses.begin() + static_cast<std::ptrdiff_t>((e + 1) * T));
    }
    const ChoiceScore s = score_choices(ex, per_ending);
    correct += s.pred == ex.label;
    correct_norm += s.pred_norm == ex.label;
    if (req.details) {
      details.push_back(Json{{"label", ex.label}, {"pred", s.pred}, {"pred_norm", s.pred_norm},
                             {"sum_loss", s.sum_loss}, {"mean_loss", s.mean_loss}});
    }
    const size_t n = in.examples.size();
    if (n >= 20 && (i + 1) % (n / 10) == 0) {
      console::err(fmt::format("[{}] multiple choice: {} of {} examples, acc_norm so far {:.4f} ({:.1f} s)\n",
                               ctx.program, i + 1, n, static_cast<double>(correct_norm) / static_cast<double>(i + 1),
                               seconds_since(t0)));
    }
  }
  const double n = static_cast<double>(in.examples.size());
  Json out{{"file", req.hellaswag}, {"examples", in.examples.size()}, {"acc", correct / n},
           {"acc_norm", correct_norm / n}, {"correct", correct}, {"correct_norm", correct_norm},
           {"seconds", round_fixed(seconds_since(t0), 3)}};
  if (req.details) out["details"] = details;
  return out;
}

}  // namespace

namespace {

// The request's own checks, before anything is read; whether --data names a shard folder.
bool checked_evaluate_request(const EvaluateRequest& req) {
  if (req.model.empty()) {
    throw std::invalid_argument("--model: the model to evaluate is required (our checkpoint, llm.c's model file or "
                                "a Hugging Face GPT-2 folder)");
  }
  if (req.data.empty() && req.hellaswag.empty()) {
    throw std::invalid_argument("evaluate: give --data (a shard folder or a text file), --hellaswag FILE, or both");
  }
  const bool shards = !req.data.empty() && fs::is_directory(req.data);
  if (!req.split.empty() && (!shards || (req.split != "val" && req.split != "train"))) {
    throw std::invalid_argument(shards ? fmt::format("--split: '{}' is not val or train", req.split)
                                       : "--split: only with --data naming a shard folder (a text file is read whole)");
  }
  if (req.batches < 0) throw std::invalid_argument(fmt::format("--batches: {} is not a count", req.batches));
  return shards;
}

// The loss over --data on the configured layout (`c` resolved with the model's settings): the result's
// data, split, batches, tokens, loss, perplexity, seconds and layout.
void evaluate_data(const EvaluateRequest& req, const RunConfig& c, bool shards, const EvaluateInputs& in,
                   const ProgramContext& ctx, Communicator& comm, int threads, Json& result) {
  const RunLayout run = resolve_run(c, comm.size(), ctx.program);  // every refusal a run of this layout gives
  const RunConfig& rc = run.config;
  check_ranks_agree(rc, comm);
  ProcessGrid grid(comm, run.tp, run.pp, run.cp);
  const GivenModel given{in.tok ? &*in.tok : nullptr, in.weights ? &*in.weights : nullptr};
  const StateSource source{StateSource::Kind::kModelFile, req.model, "--model"};
  const std::unique_ptr<RunState> st = init_or_resume(run, source, ctx.backend, threads, 0, grid, given);
  const bool val = shards && req.split != "train";
  const TokenStream& stream = val ? st->data.split.val : st->data.split.train;
  const int64_t batch_tokens = int64_t{rc.train.batch_size} * rc.train.seq_len;
  const int64_t whole = stream.size() > 0 ? (stream.size() - 1) / batch_tokens : 0;
  const std::string what = shards ? fmt::format("--data '{}' ({} split, {} tokens)", req.data, val ? "val" : "train",
                                                stream.size())
                                  : fmt::format("--data '{}' ({} tokens)", req.data, stream.size());
  if (whole == 0 || req.batches > whole) {
    throw std::invalid_argument(fmt::format("{}: holds {} whole batches of train.batch_size x train.seq_len = {} x "
                                            "{} (+1) tokens{}", what, whole, rc.train.batch_size, rc.train.seq_len,
                                            req.batches > whole ? fmt::format(", not --batches {}", req.batches) : ""));
  }
  const int64_t batches = req.batches > 0 ? req.batches : whole;
  if (batches > INT32_MAX) {
    throw std::invalid_argument(fmt::format("{}: {} batches are more than one evaluation counts ({}); give --batches",
                                            what, batches, INT32_MAX));
  }
  const std::unique_ptr<StepMachine> lay = build_step(run, *st, grid, 0.0);
  StepFeed feed(run, grid);
  DataLoader loader(stream, rc.train.batch_size, rc.train.seq_len, LoaderKind::kSequential, rc.train.seed,
                    grid.replica() * st->rows, st->rows);
  const auto t0 = Clock::now();
  int64_t served = 0;
  const double loss = evaluate(*lay->step, static_cast<int>(batches), feed.inputs(), feed.targets(), [&](int32_t*,
                                                                                                        int32_t*) {
    loader.next(feed.x(), feed.y());
    feed.cut();
    if (comm.rank() == 0 && batches >= 20 && ++served % (batches / 10) == 0) {
      console::err(
          fmt::format("[{}] evaluate: batch {} of {} ({:.1f} s)\n", ctx.program, served, batches, seconds_since(t0)));
    }
  });
  result["data"] = req.data;
  if (shards) result["split"] = val ? "val" : "train";
  result["batches"] = batches;
  result["tokens"] = batches * batch_tokens;
  result["loss"] = loss;
  result["perplexity"] = std::exp(loss);
  result["seconds"] = round_fixed(seconds_since(t0), 3);
  result["layout"] = run.describe();
}

}  // namespace

void run_evaluate(const EvaluateRequest& req, const ProgramContext& ctx) {
  std::unique_ptr<Communicator> local;
  Communicator& comm = ctx.comm ? *ctx.comm : *(local = make_local_communicator());
  const bool shards = checked_evaluate_request(req);
  RunConfig c = req.config;
  // The data section: --data's shards or text (read whole); no training, no validation split.
  c.data.shards = shards ? req.data : "";
  c.data.corpus = shards ? "" : req.data;
  c.data.val_fraction = 0;
  c.train.eval_every = 0;
  c.train.init_from.clear();
  if (shards) c.data.tokenizer = TokenizerKind::kGpt2;  // shards hold GPT-2's ids
  {  // the user's keys, before the model is read; what depends on the model's sizes is checked again below
    RunConfig first = c;
    first.model.T = std::max(first.model.T, first.train.seq_len);
    validate_with_split(first);
  }
  const EvaluateInputs in = read_evaluate_inputs(req, c, comm);
  if (shards && c.data.tokenizer != TokenizerKind::kGpt2) {
    throw std::invalid_argument(fmt::format("--data: '{}' holds GPT-2 BPE ids, but --model '{}' keeps a {} tokenizer",
                                            req.data, req.model, to_string(c.data.tokenizer)));
  }
  const int threads = resolve_threads(c.train.threads);
  Json result{{"model", req.model}, {"format", comm.rank() == 0 ? in.weights->format : ""}};
  if (req.data.empty()) c.train.seq_len = c.model.T;  // no batches: the multiple choice's rows are its own
  validate_with_split(c);
  if (!req.data.empty()) evaluate_data(req, c, shards, in, ctx, comm, threads, result);
  if (!req.hellaswag.empty() && comm.rank() == 0) result["hellaswag"] = score_multiple_choice(req, c, in, ctx, threads);
  if (comm.rank() == 0) {
    fmt::print("{}\n", json_text(result));
    std::fflush(stdout);
  }
  comm.barrier();
}

}  // namespace gpt2
