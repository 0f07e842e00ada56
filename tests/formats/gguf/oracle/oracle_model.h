// Tiny nemotron_h_moe models for the llama.cpp oracle tests: random weights in any ggml type tandem
// computes, laid out and described as llama.cpp's converter writes them (spec/nemotron_h.md § 10),
// and — for float-valued models — the same weights as an HF BF16 safetensors folder.
// Owner: an OracleModel owns its tensors. Thread: any. Sync: none.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/gguf/gguf_metadata.h"
#include "formats/gguf/gguf_writer.h"
#include "formats/safetensors/safetensors_writer.h"

namespace tandem::gguf::oracle {

// Every matrix row is a multiple of 256 elements, so each K/IQ type applies where llama.cpp allows it.
struct Dims {
  static constexpr int H = 256, V = 512;                             // hidden, vocabulary
  static constexpr int NH = 8, P = 32, DIN = NH * P, G = 2, N = 16, K = 4;  // Mamba2
  static constexpr int CONV = DIN + 2 * G * N, IN_PROJ = DIN + CONV + NH;
  static constexpr int NQ = 4, NKV = 2, HD = 64;                     // attention
  static constexpr int E = 8, TOPK = 2, W = 256, SH = 256, L = 256;  // MoE (latent L when enabled)
  // The first E residual dimensions carry the routing code of the token (see oracle_model.cpp).
  static constexpr int ROUTE_DIMS = E;
};

struct OracleSpec {
  std::string name;             // label in reports
  std::string pattern = "MEM*E";
  bool latent = true;           // moe_latent_size = L
  int expert_type = 8;          // ggml type id of ffn_up_exps / ffn_down_exps (F32, F16, BF16, Q8_0 from floats)
  // Non-expert matrices are F32 unless `mixed`: then token_embd, output, attention and the latent
  // projections are Q8_0, ssm_in and the shared up-projection F16, ssm_out and the shared
  // down-projection BF16. Norms, router, conv and other vectors are always F32.
  bool mixed = false;
  bool nvfp4_mamba = false;     // ssm_in / ssm_out NVFP4 with F32 .scale sidecars, as NVIDIA's file
  // Only layer 0's ffn_up_exps (layer 0 is E) or ssm_in (layer 0 is M) is expert_type, and its
  // input reaches it exactly representable in llama.cpp's activation blocks, so llama.cpp's Q8_0 /
  // Q8_K rounding loses nothing: the embedding is F32 integers times 2^-6 with a mean square of
  // exactly 1 and a ±127 in every 32-element block, RMSNorm has eps 0 and weight 1 there, the latent
  // down-projection is a block permutation. Everything else is F32, so the two engines must agree
  // to fp32 rounding.
  bool exact = false;
  // ≥ 0: every matrix, experts included, is this float-representable type (F32, F16, BF16, Q8_0),
  // made from bf16-rounded values that the HF folder holds as BF16; expert_type is then ignored.
  int uniform_type = -1;
  uint64_t seed = 1;
};

struct OracleModel {
  OracleSpec spec;
  Metadata metadata;
  std::vector<WriteTensor> tensors;                  // the GGUF tensors, in file order
  std::vector<safetensors::WriteTensor> hf;          // uniform_type ≥ 0 only: the HF checkpoint
  std::string hf_config;                             // its config.json
};

OracleModel build_oracle_model(const OracleSpec& spec);
// A decoding error's stand-in: flips one bit (a quant bit, or an exponent bit of F16/BF16/F32) in the
// first 8 rows of every expert of the tensors under test: layer 0's ffn_up_exps or ssm_in when the
// model is exact, else every ffn_up_exps. Returns how many tensors changed.
int corrupt_tested(OracleModel& m);

// Writes <dir>/config.json and <dir>/model.safetensors (needs a uniform_type model).
void write_hf_folder(const OracleModel& m, const std::string& dir);

// Deterministic prompts of the given lengths over the model's vocabulary (ids ≥ 3: no control tokens).
std::vector<std::vector<int32_t>> oracle_prompts(const std::vector<int>& lengths, uint64_t seed);

}  // namespace tandem::gguf::oracle
