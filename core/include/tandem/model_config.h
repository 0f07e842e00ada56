// The model description: every layer's kind and sizes, parsed from an HF config.json
// (nemotron_h or nemotron_h_puzzle; a GGUF reader synthesizes the same JSON).
// Owner: value type. Thread: any. Sync: none.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/plugin_abi.h"

namespace tandem {

enum class LayerKind { Mamba, Attention, MoE, MLP };
TANDEM_API const char* layer_kind_name(LayerKind k);

struct MambaDesc {
  int n_heads = 0;     // nh
  int head_dim = 0;    // P
  int n_groups = 0;    // G
  int state_size = 0;  // N
  int conv_kernel = 4; // K
  int chunk_size = 128;
  bool conv_bias = true;
  bool proj_bias = false;
  float eps = 1e-5f;
  float time_step_min = 1e-3f;  // only used in the HF-prefill clamp mode (off by default)
  bool clamp_dt_prefill = false;
  int d_inner() const { return n_heads * head_dim; }
  int conv_dim() const { return d_inner() + 2 * n_groups * state_size; }
  int in_proj_rows() const { return d_inner() + conv_dim() + n_heads; }
};

struct AttentionDesc {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  bool bias = false;
};

struct MoEDesc {
  int n_experts = 0;         // E
  int top_k = 0;             // k
  int width = 0;             // w (moe_intermediate_size)
  int shared_width = 0;      // SH (0 = no shared expert)
  int n_shared = 1;
  int latent = 0;            // L (0 = no latent projections)
  float scaling = 1.0f;
  int n_group = 1;
  int topk_group = 1;
  bool norm_topk_prob = true;
};

struct MLPDesc {
  int width = 0;  // intermediate_size
  bool bias = false;
};

struct LayerDesc {
  LayerKind kind = LayerKind::Mamba;
  MambaDesc mamba;
  AttentionDesc attn;
  MoEDesc moe;
  MLPDesc mlp;
};

struct ModelDesc {
  std::string model_type;  // "nemotron_h", "nemotron_h_puzzle"
  int vocab = 0;
  int hidden = 0;
  float eps = 1e-5f;
  bool tie_embeddings = false;
  std::vector<LayerDesc> layers;
  std::vector<int> eos_ids;
  int64_t max_positions = 0;
  // The multi-token-prediction head the config describes (num_nextn_predict_layers and its pattern,
  // mtp_hybrid_override_pattern / mtp_layers_block_type / mtp_block_configs: "*E" for Super): recorded
  // so a loader can name what it skips; no layer is built for it yet.
  int mtp_layers = 0;
  std::string mtp_pattern;  // "" when the config gives none

  std::string pattern() const;  // "MEM*E…"
};

// Parses config.json text. `source` names the file in errors. A vision-language wrapper's text model is
// read from its llm_config (NVIDIA's VL/Omni releases) or text_config. Unknown model types, missing or
// ill-typed fields are errors that name the field.
TANDEM_API ModelDesc parse_model_config(const std::string& json_text, const std::string& source);

}  // namespace tandem
