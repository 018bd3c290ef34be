// Gpt2Config: the model's sizes, and the named presets.
// Letters used for sizes throughout the code base:
//   V vocabulary, T sequence length (block size), L layers, NH heads,
//   C channels (n_embd), HS = C / NH head size, B batch rows, N = B * T.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpt2 {

// How the initial weights are drawn (model/params.h, initial_weights):
//   philox    ours: N(0, 0.02) from Philox keyed by (seed, tensor, element);
//             any element computed alone, on any rank or device.
//   original  the reproduced project's scheme, exactly (DESIGN.md): srand(seed)
//             once, then glibc rand() through a single-precision Box-Muller,
//             tensor by tensor in their order and layout.
enum class InitKind { kPhilox, kOriginal, kGpt2 };
InitKind parse_init_kind(const std::string& name);  // "philox" | "original" | "gpt2"
std::string to_string(InitKind kind);
inline void from_string(const std::string& name, InitKind& kind) { kind = parse_init_kind(name); }

// Architecture variants (DESIGN.md "Architecture variants"; issue 17). Each
// component is chosen by a key; `model.arch` sets the defaults of the others:
//   gpt2   LayerNorm, pre-norm, learned positions, GELU, standard MLP (today's model, bit for bit);
//   llama  RMSNorm, pre-norm, RoPE, SiLU, SwiGLU.
// kAuto ("auto", the default of every component key) means "as the arch
// says"; resolved() replaces it, so a resolved configuration (what runs
// write and checkpoints record) names every component.
enum class Arch { kGpt2, kLlama };
enum class NormKind { kAuto, kLayerNorm, kRmsNorm };
enum class NormPosition { kAuto, kPre, kPost };
enum class PositionKind { kAuto, kLearned, kRope };
enum class ActivationKind { kAuto, kGelu, kRelu, kSilu };
enum class MlpKind { kAuto, kStandard, kSwiglu };
// Which linear layers have a bias (the norms keep theirs in every setting):
//   proj  the reproduced project's: the attention projection and the MLP's
//         two, none on q, k, v (every commit before this key);
//   all   GPT-2's: q, k, v too (qkv_b);
//   none  no linear biases (the bias-free projections of PaLM and of
//         nanoGPT's bias=False, which also drops the norms' biases).
enum class BiasKind { kProj, kAll, kNone };
std::string to_string(Arch v);
std::string to_string(NormKind v);
std::string to_string(NormPosition v);
std::string to_string(PositionKind v);
std::string to_string(ActivationKind v);
std::string to_string(MlpKind v);
std::string to_string(BiasKind v);
void from_string(const std::string& name, Arch& v);
void from_string(const std::string& name, NormKind& v);
void from_string(const std::string& name, NormPosition& v);
void from_string(const std::string& name, PositionKind& v);
void from_string(const std::string& name, ActivationKind& v);
void from_string(const std::string& name, MlpKind& v);
void from_string(const std::string& name, BiasKind& v);

// The longest block_size accepted: every activation arena and the position
// table are sized by it (model.block_size above it is refused).
inline constexpr int kMaxBlockSize = 1 << 20;
// The other sizes' bounds (docs/guarantees.md "Sizes"), far above any model
// this engine trains, so that every size derived from them (4 x n_embd, the
// parameter count, its bytes) is computed without overflow and a plan of any
// configuration it accepts takes milliseconds: n_layer, n_embd, the MLP's
// hidden width, the vocabulary rows, and the parameters in all.
inline constexpr int kMaxLayers = 4096;
inline constexpr int kMaxEmbd = 1 << 16;
inline constexpr int kMaxMlpHidden = 1 << 20;
inline constexpr int kMaxVocab = 1 << 24;
inline constexpr uint64_t kMaxParams = uint64_t{1} << 40;

struct Gpt2Config {
  int V = 172;   // vocab_size
  int T = 256;   // block_size: the longest sequence (learned position rows)
  int L = 6;     // n_layer
  int NH = 6;    // n_head
  int C = 384;   // n_embd
  InitKind init = InitKind::kPhilox;  // how init_weights draws (the weights' function of train.seed)

  Arch arch = Arch::kGpt2;
  NormKind norm = NormKind::kAuto;
  NormPosition norm_position = NormPosition::kAuto;
  PositionKind position = PositionKind::kAuto;
  float rope_theta = 10000.0f;
  ActivationKind activation = ActivationKind::kAuto;
  MlpKind mlp = MlpKind::kAuto;
  int mlp_hidden = 0;    // 0: the rule of mlp_width()
  int n_kv_head = 0;     // 0: n_head (multi-head attention)
  bool tie_embeddings = false;
  BiasKind bias = BiasKind::kProj;
  // Ids the logits cover: columns [vocab_valid, V) are padding rows of wte
  // and lm_head (GPT-2's 50,257 ids in 50,304 rows, a multiple of 64),
  // masked out of the softmax (zero probability, zero gradient). 0 = V.
  int vocab_valid = 0;

  int head_size() const { return C / NH; }
  // The components with kAuto resolved by the arch (the getters below use
  // these; resolved() writes them into the fields).
  NormKind norm_kind() const;
  NormPosition norm_pos() const;
  PositionKind position_kind() const;
  ActivationKind activation_kind() const;  // SwiGLU gates with SiLU, so auto is silu there
  MlpKind mlp_kind() const;
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : NH; }
  bool rms() const { return norm_kind() == NormKind::kRmsNorm; }
  bool rope() const { return position_kind() == PositionKind::kRope; }
  bool swiglu() const { return mlp_kind() == MlpKind::kSwiglu; }
  bool post_norm() const { return norm_pos() == NormPosition::kPost; }
  bool qkv_bias() const { return bias == BiasKind::kAll; }
  bool proj_bias() const { return bias != BiasKind::kNone; }
  int valid_vocab() const { return vocab_valid > 0 ? vocab_valid : V; }
  bool masks_vocab() const { return valid_vocab() < V; }
  // The default GPT-2 block in every component (the layout and arithmetic of
  // every commit before the variants).
  bool is_gpt2() const;
  // Widths: q, k, v of one position ((NH + 2 KVH) heads); the MLP's hidden
  // width H: mlp_hidden if set, else 4C (standard) or 8C/3 rounded up to a
  // multiple of 16 (SwiGLU: three matrices of C x H hold about the 8C^2
  // parameters of the standard two); the fc output (H, or 2H for SwiGLU's
  // gate and up halves).
  int qkv_width() const { return (NH + 2 * kv_heads()) * head_size(); }
  int mlp_width() const;
  int fc_width() const { return swiglu() ? 2 * mlp_width() : mlp_width(); }
  // A copy with every auto component and mlp_hidden / n_kv_head resolved.
  Gpt2Config resolved() const;
  // The field names of the architecture keys, from "arch" to
  // "vocab_valid" (checkpoints older than them read as the default GPT-2).
  static const std::vector<std::string>& variant_keys();

  // Throws std::invalid_argument naming the field and the rule it breaks.
  // vocab_size 0 is accepted when `vocab_from_tokenizer` (a configuration
  // not yet resolved against its tokenizer).
  void validate(bool vocab_from_tokenizer = false) const;

  // The one list of this section's fields (util/fields.h).
  template <typename F>
  void visit_fields(F&& f) {
    f("vocab_size", V, "vocabulary rows of wte and lm_head; 0 = the tokenizer's vocabulary size");
    f("block_size", T, "longest sequence (rows of the position embedding)");
    f("n_layer", L, "transformer blocks");
    f("n_head", NH, "attention heads; must divide n_embd");
    f("n_embd", C, "channels");
    f("init", init,
      "initial weights from train.seed: philox (ours: Philox, any element alone; weights N(0, 0.02)), gpt2 "
      "(philox's draws with GPT-2's residual projections, attn_proj_w and fc_proj_w, scaled by 1/sqrt(2 "
      "n_layer)) or original (the reproduced project's srand/rand Box-Muller, exactly; their seed was 1234)");
    f("arch", arch,
      "architecture preset setting the defaults of the component keys: gpt2 (LayerNorm, pre-norm, learned "
      "positions, GELU, standard MLP) or llama (RMSNorm, pre-norm, RoPE, SiLU, SwiGLU)");
    f("norm", norm, "normalisation: layernorm | rmsnorm | auto (the arch's)");
    f("norm_position", norm_position, "where the norms sit: pre (GPT-2) | post (original Transformer) | auto");
    f("position", position, "positions: learned (wpe table) | rope (rotary, no table) | auto");
    f("rope_theta", rope_theta, "RoPE base: pair i of a head turns by pos * rope_theta^(-2i/head_size)");
    f("activation", activation, "MLP activation: gelu (tanh form) | relu | silu | auto (silu with swiglu)");
    f("mlp", mlp, "MLP: standard (fc, activation, proj) | swiglu (silu(gate) * up, then proj) | auto");
    f("mlp_hidden", mlp_hidden,
      "MLP hidden width; 0 = 4 x n_embd (standard) or 8 x n_embd / 3 rounded up to a multiple of 16 (swiglu)");
    f("n_kv_head", n_kv_head, "key/value heads (grouped-query attention); must divide n_head; 0 = n_head");
    f("tie_embeddings", tie_embeddings, "the head reuses wte (no lm_head tensor)");
    f("bias", bias,
      "linear biases: proj (the attention projection and the MLP; none on q, k, v: the reproduced project's) | all "
      "(q, k, v too: GPT-2's) | none (no linear biases; the norms keep theirs)");
    f("vocab_valid", vocab_valid,
      "ids the logits cover; columns from here to vocab_size are padding, masked out of the softmax (GPT-2: 50257 "
      "of 50304); 0 = vocab_size");
  }
  std::string describe() const;
  // Equal when the resolved configurations are (auto and what it resolves to are the same model).
  bool operator==(const Gpt2Config& o) const;
};

// "original": the reproduced project's final configuration (DESIGN.md):
//   V 172, T 256, L 6, NH 6, C 384.
// "small": a few-layer model for tests: V 64, T 32, L 2, NH 4, C 64.
// "gpt2-124m": GPT-2 small exactly: V 50304 rows for 50257 ids, T 1024,
//   L 12, NH 12, C 768, q/k/v biases, the head tied to wte.
Gpt2Config preset(const std::string& name);
std::vector<std::string> preset_names();

// `model` with vocab_size 0 resolved to the tokenizer's vocabulary size.
// Throws std::invalid_argument naming model.vocab_size if the tokenizer has
// more tokens than the model has rows.
Gpt2Config resolve_vocab(Gpt2Config model, int tokenizer_vocab);

}  // namespace gpt2
