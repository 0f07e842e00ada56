// What a synthetic model holds: every weight in its HF and GGUF forms, the container tensors of a
// weight mix (NVIDIA's 2-bit GGUF type mix, or BF16 safetensors), and the counts that follow from
// them: parameters, bytes, and bytes read per decoded token (spec/nemotron_h.md § 13.3–13.4).
// Owner: a Plan owns its weights and tensors (tensors refer to weights by index). Thread: any.
// Sync: none.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/model_config.h"
#include "tandem/writer.h"

namespace tandem {
class PluginRegistry;
}

namespace tandem::synth {

// gguf-iq2: routed and shared experts IQ2_XXS, Mamba in/out NVFP4 with a per-tensor `.scale`,
// attention, latent projections, lm_head and embedding Q8_0, router, norms and Mamba vectors F32
// (spec/formats.md § 4.1). A row length a type cannot hold falls back as llama-quantize does (IQ2_XXS →
// IQ4_NL, NVFP4 → Q8_0, Q8_0 → F16). bf16: an HF folder, every tensor BF16 except the router's
// correction bias (F32). exl3-2: an HF folder in the layout of exllamav3's Bolt 2.0 pack (spec/formats.md
// § 5.10): routed experts K=2; Mamba, attention, latent, shared (and dense MLP) projections K=4;
// lm_head K=6; mul1 codebook; random trellis words (every word stream is a valid tail-biting trellis),
// suh = ±std and svh = ±1 so that W has the initializer's scale; the rest as in bf16. nvfp4: an HF
// folder in NVIDIA ModelOpt's layout (spec/formats.md § 6.1–6.3) with config.json's
// quantization_config (quant_method modelopt, MIXED_PRECISION, quantized_layers, ignore), as the
// Nemotron NVFP4 releases store it (§ 6.3 item 4): routed and shared experts NVFP4 (U8 codes, F8_E4M3
// block scales, F32 weight_scale_2 and input_scale); Mamba in/out, attention, latent (and dense MLP)
// projections FP8 with a per-tensor F32 weight_scale; the rest as in bf16. An NVFP4 row length that is
// not a multiple of 64 (the CUDA repack's block) falls back to FP8.
// gguf-TYPE (gguf-q4_k, gguf-iq4_xs, … for a GGUF ladder type): every linear but the embedding and
// lm_head in TYPE (a row length TYPE cannot hold falls back to Q8_0), embedding and lm_head Q8_0, the
// rest F32 as in gguf-iq2; Q4_K/Q5_K blocks get a dmin that centres their values on zero.
// Types are named as strings; the container's Writer (plugin "gguf" or "safetensors", found by name
// through the registry) knows their block geometry and makes random blocks of its quantized types.
enum class Mix { GgufIq2, Bf16, Exl3_2, Nvfp4, GgufType };
// A mix as named on the command line; gguf_type is Mix::GgufType's block type ("Q4_K"), else empty.
struct MixSpec {
  Mix mix = Mix::GgufIq2;
  std::string gguf_type;
};
std::string mix_label(const MixSpec& mix);  // its name, lower case: "gguf-iq2", "gguf-q4_k"
// "gguf-iq2", "bf16", "exl3-2", "nvfp4" or "gguf-TYPE" with TYPE one of kGgufMixTypes (any case);
// errors list the names.
MixSpec parse_mix(const std::string& name);
// The GGUF block types a gguf-TYPE mix can take (the types with random blocks and CUDA kernels).
extern const char* const kGgufMixTypes[];
extern const int kGgufMixTypeCount;
const char* mix_name(Mix mix);           // gguf-TYPE mixes: "gguf-type"
bool is_gguf(Mix mix);                   // written as one GGUF file (gguf-iq2, gguf-TYPE)
const char* mix_writer(Mix mix);         // the Writer a mix's files are written with: "gguf", "safetensors"
// The Writer of that name from `registry`, or when null from the default plugins (loaded once,
// TANDEM_PLUGIN_PATH and the default folder). Error: no loaded plugin provides it (the message lists
// those that do).
std::shared_ptr<const Writer> find_writer(const std::string& name, PluginRegistry* registry = nullptr);

// What a weight is for: decides its type in a mix and which weights a decode step reads.
enum class Role { Embedding, Head, Norm, MambaProj, MambaVector, Attention, Latent, Router, RouterBias, Routed, Shared, Mlp };
// How its values are drawn (HF's initializers, with linears scaled to unit gain).
enum class Init {
  Linear,     // uniform, std 1/√fan_in
  Embedding,  // uniform, std 1
  Ones,
  Zeros,
  ALog,       // log U(1, 16) (HF A_log)
  A,          // −U(1, 16) (GGUF ssm_a = −exp(A_log))
  DtBias,     // softplus⁻¹ of dt = exp(U(log 0.001, log 0.1))
  Conv,       // uniform ±1/√K, conv weights and bias
};

struct Weight {
  Role role;
  Init init;
  int layer = -1;                 // -1: embedding, final norm, lm_head
  std::string hf_name;            // HF name; routed experts hold "{e}" where the expert index goes
  std::vector<int64_t> hf_shape;  // PyTorch order, one expert for routed experts
  std::string gguf_name;          // llama.cpp name
  std::vector<int64_t> ne;        // ggml order, stacked experts {in, out, E}
  std::string view_name;          // the name GGUF readers give it (HF, with A for ssm_a), "{e}" as above
  std::vector<int64_t> view_shape;  // the shape they give it (size-1 dims of vectors dropped)
  int n_experts = 0;              // routed experts: E; else 0
  int64_t fan_in = 0;             // row length (ggml ne[0])
  double stddev = 0;              // Linear, Embedding, Conv: the values' standard deviation

  int64_t numel() const;          // all experts
  std::string expert_name(const std::string& pattern, int e) const;  // "{e}" → e
};

// One tensor of the container: a GGUF tensor (experts stacked), or an HF safetensors tensor (one per
// expert), or an NVFP4 `.scale` sidecar.
struct StoredTensor {
  std::string name;            // as stored
  std::string dtype;           // "IQ2_XXS", "NVFP4", "Q8_0", "F32", "BF16", …
  int type_order = -1;         // the order pools of this type are made in (see synth_plan.cpp)
  int64_t block_elems = 1;     // the type's block along the row
  std::vector<int64_t> shape;  // as stored: ggml ne (GGUF) or PyTorch (safetensors)
  int64_t row_len = 0;         // elements per row (the contiguous dimension)
  int64_t rows = 0;
  size_t row_bytes = 0;
  size_t nbytes = 0;
  int weight = -1;             // index into Plan::weights
  int expert = -1;             // safetensors: which routed expert
  bool scale = false;          // the per-tensor scale (NVFP4's) of `weight`, stored as `scale_of`
  std::string scale_of;        // the dtype whose companion scale this is
  int exl3_part = kExl3None;   // exl3 mix: which tensor of the EXL3 linear this is
  enum : int { kExl3None = 0, kExl3Trellis, kExl3Suh, kExl3Svh, kExl3Mul1 };
  int modelopt_part = kModeloptNone;  // nvfp4 mix: which tensor of the ModelOpt linear this is
  enum : int { kModeloptNone = 0, kNvfp4Weight, kNvfp4BlockScale, kNvfp4GlobalScale, kFp8Weight, kFp8Scale, kInputScale };
  // A per-tensor F32 whose value follows the weight's std (weight_scale_2, FP8's weight_scale,
  // input_scale): never shared between weights.
  bool modelopt_scalar() const {
    return modelopt_part == kNvfp4GlobalScale || modelopt_part == kFp8Scale || modelopt_part == kInputScale;
  }
};

// The nvfp4 mix's constants (spec/formats.md § 6.1). Every NVFP4 block scale is 448, the E4M3 value
// ModelOpt gives a block holding the tensor's amax (nearly every block of uniform random codes holds
// a ±6), and weight_scale_2 sets the std: W = e2m1(q)·448·weight_scale_2.
constexpr uint8_t kNvfp4BlockScaleByte = 0x7E;   // E4M3 448
constexpr double kNvfp4BlockScale = 448.0;
// input_scale = amax(x)/(6·448) for activations of amax 6 (recorded by the reader, not used).
constexpr float kModeloptInputScale = 1.0f / 448.0f;
double nvfp4_code_rms();                          // rms of e2m1 over uniform random nibbles: √(68.5/8)
float nvfp4_weight_scale_2(double stddev);        // stddev / (code rms · 448)
// FP8 weights: the initializer's uniform ±√3·std drawn as E4M3 codes of ±448·u, so weight_scale is
// amax/448 as ModelOpt sets it.
float fp8_weight_scale(double stddev);

struct Totals {
  int64_t params = 0;          // every weight (HF form; scale sidecars are not parameters)
  int64_t routed = 0;          // routed-expert parameters
  int64_t active = 0;          // read per token: all but routed and embedding, plus top_k experts
  size_t bytes = 0;            // the container's tensor bytes
  size_t decode_bytes = 0;     // read per decoded token: all but routed experts and embedding, plus
                               // top_k experts per MoE layer and one embedding row
};

struct Plan {
  ModelDesc desc;
  Mix mix;
  std::string gguf_type;  // Mix::GgufType's block type, else empty
  std::string mix_label;  // the mix's name: "gguf-iq2", "gguf-q4_k", …
  std::shared_ptr<const Writer> writer;  // mix_writer(mix)
  std::vector<Weight> weights;
  std::vector<StoredTensor> tensors;
  Totals totals;
};

// Every weight of `desc` and the tensors of `mix`, written with `registry`'s writer (null: the default
// plugins'; a command that has loaded its plugins passes its registry, so they load once). The
// registry must outlive the plan. Errors name the shape a mix cannot hold.
Plan make_plan(const ModelDesc& desc, const MixSpec& mix, PluginRegistry* registry = nullptr);
// A named mix (not Mix::GgufType, which needs its type: the MixSpec form).
Plan make_plan(const ModelDesc& desc, Mix mix, PluginRegistry* registry = nullptr);

}  // namespace tandem::synth
