// Model files other tools read (issue 32; DESIGN.md "Data and formats"):
// llm.c's model file, both ways, and safetensors with a config.json laid out
// as Hugging Face's GPT2LMHeadModel loads them.
//
// llm.c's model file (train_gpt2.c, version 3: fp32):
//   header  256 little-endian int32: 20240326, 3, max T, V, L, NH, C, padded V
//   then    wte (Vp, C), wpe (T, C), and per kind over all L layers:
//           ln1w, ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C), attprojw (L, C, C),
//           attprojb (L, C), ln2w, ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C),
//           fcprojw (L, C, 4C), fcprojb (L, C); lnfw, lnfb (C)
// It holds GPT-2's block only (LayerNorm, pre-norm, learned positions, GELU
// in tanh form, a 4C MLP, multi-head attention) with the head tied to wte.
// qkvw's rows are q, then k, then v, each by head: our qkv_w's. A model
// without some linear biases (model.bias proj or none) is the same function
// with those biases 0, so they are written as zeros; read back, the model
// has model.bias all. llm.c's V (the ids) is our model.vocab_valid and its
// padded V our model.vocab_size.
//
// safetensors: an 8-byte little-endian header length, a JSON header (name ->
// dtype F32, shape, data offsets; "__metadata__": {"format": "pt"}), then the
// tensors' bytes. Names and shapes are GPT2LMHeadModel's: transformer.wte
// (only the model.vocab_valid real rows), transformer.wpe,
// transformer.h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
// mlp.c_proj}, transformer.ln_f, and lm_head.weight when the head is not tied.
// Its Conv1D weights are (in, out): ours transposed.
#pragma once

#include <span>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/tokenizer.h"

namespace gpt2 {

inline constexpr int32_t kLlmcModelMagic = 20240326;

// What keeps `cfg` out of llm.c's file, in one phrase naming the key and its
// value (e.g. "model.tie_embeddings false: llm.c ties the head to wte"); ""
// when it fits.
std::string llmc_difference(const Gpt2Config& cfg);
// The same for GPT2LMHeadModel (which has its own head when untied).
std::string hf_gpt2_difference(const Gpt2Config& cfg);

// Writes `params` (layout order, model/params.h) of `cfg` as an llm.c model
// file, atomically. Throws std::invalid_argument with llmc_difference.
void write_llmc_model(const std::string& path, const Gpt2Config& cfg, std::span<const float> params);

struct LlmcModel {
  Gpt2Config config;          // GPT-2's block, bias all, tied, vocab_valid = llm.c's V when padded
  std::vector<float> params;  // in our layout
};
// Reads an llm.c model file. Throws std::invalid_argument naming the file:
// missing, a wrong magic, a version other than 3 (fp32) or 5 (bf16, widened
// exactly), sizes that do
// not make a model, or a size other than the header's.
LlmcModel read_llmc_model(const std::string& path);

// A Hugging Face GPT-2 folder (config.json of GPT2LMHeadModel or GPT2Model,
// and model.safetensors or model.safetensors.index.json with the files its
// weight_map names): tensors named with "transformer." or without, lm_head
// stored or tied, values F32, F16 or BF16 (widened exactly), Conv1D weights
// (in, out) transposed to ours. Throws std::invalid_argument naming the
// file and the key: a missing config.json, a config of another model
// (activation, n_inner, epsilon, attention scaling), a header that is
// truncated, oversized (over 100 MB) or lies about its bytes, a dtype other
// than those three, a tensor missing, unknown or of another shape (both
// shapes named), a value not finite.
struct HfModel {
  Gpt2Config config;  // GPT-2's block, bias all, tied as config.json says; vocab_size as stored
  std::vector<float> params;
};
HfModel read_hf_gpt2(const std::string& dir);
// The folder's own GPT-2 tokenizer files (vocab.json and merges.txt, which
// are encoder.json and vocab.bpe), or none when either is missing.
std::optional<std::pair<std::string, std::string>> hf_tokenizer_files(const std::string& dir);

// Writes DIR/model.safetensors and DIR/config.json (creating DIR; each file
// atomically). `tok` gives the end-of-text id written to config.json.
// Throws std::invalid_argument with hf_gpt2_difference.
void write_hf_gpt2(const std::string& dir, const Gpt2Config& cfg, std::span<const float> params, const Tokenizer& tok);

}  // namespace gpt2
