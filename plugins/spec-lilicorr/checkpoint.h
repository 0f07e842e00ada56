// Loading a LiLiCorr / DFlash drafter checkpoint (spec/lilicorr.md § 1–2): an HF folder with
// config.json (dflash_config keys) and safetensors in BF16, F16 or F32, with quantized modules in
// ModelOpt's NVFP4 layout or MLX's nvfp4/mxfp4 ones (quant.h). Both the export names of the
// head (nn.Sequential: feature_mlp.0/1/3, mlp.0/2) and the serving names (feature_norm, up_proj,
// down_proj) load; geometry comes from the tensors and must agree with the config. rope_scaling yarn
// becomes the backbone's frequency table (yarn.h); an own `embed_tokens.weight` is kept.
// Owner: DrafterWeights are immutable after load and shared by every drafter of the checkpoint.
// Thread: load on one thread. Sync: none (host memory).
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backbone.h"
#include "head.h"
#include "quant.h"

namespace tandem::lilicorr {

// A tensor as f32 host values, shape as stored ([out, in] for a quantized linear, its values
// dequantized), with the NVFP4 form of a module stored so.
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
  std::shared_ptr<const Nvfp4Weight> nvfp4;
};
using TensorMap = std::map<std::string, HostTensor>;

// The serving name of a head tensor given under its export name (names without the "lilicorr."
// prefix); other names come back unchanged.
std::string serving_name(const std::string& head_name);

// Every tensor of the folder as f32, names without a leading "model." and head names in serving form;
// quantized modules (quant.h: read_quant, read_quantized) under `<module>.weight`, held first to the
// ModelOpt config (an excluded module must be stored dense: formats/nvfp4's check_against_config).
// Errors: read_quantized's and read_quant's, two names that become one.
TensorMap read_tensors(const std::string& dir);

// The head's settings from config.json (dflash_config.lilicorr_*), before the tensors are read.
struct HeadSettings {
  bool declared = false;  // lilicorr_enabled / projector_type "lilicorr" / architecture LiLiCorrDraftModel
  int topk = 0, layers = 0, heads = 0;
  int64_t hidden = 0;     // 0 = the backbone's width
  double mlp_ratio = 0;
  int64_t factor = 0;
  double vector_eps = 0, logit_scale = 0;
  bool complete = false;  // every lilicorr_* key present
};

struct DrafterConfig {
  BackboneConfig backbone;
  HeadSettings head;
  int64_t vocab = 0;  // 0 when config.json has no vocab_size
};

// Parses config.json text; `source` names the file in errors.
DrafterConfig parse_config(const std::string& json, const std::string& source);

struct DrafterWeights {
  std::string path;
  BackboneWeights backbone;
  std::optional<HeadWeights> head;  // nullopt: the backbone's per-slot argmax drafts
  // The drafter's own token table `embed_tokens.weight` [vocab, hidden] (out = vocab), empty without
  // one: the block's rows are embedded by it instead of the target's (the candidates still use the
  // target's, as SGLang and vLLM do).
  Linear embed;
};

// Builds the backbone and (when any lilicorr.* tensor exists) the head from `tensors`, checking each
// shape against the config; `source` names the folder in errors. Every tensor must be used.
DrafterWeights build_weights(const DrafterConfig& config, TensorMap tensors, const std::string& source);
// The head alone from lilicorr.* tensors (serving names), for a backbone width `model_hidden`.
HeadWeights build_head(const HeadSettings& s, int block, float rms_eps, int64_t model_hidden, TensorMap& tensors,
                       const std::string& source);

// Opens `dir` (config.json + safetensors).
std::shared_ptr<const DrafterWeights> load_drafter(const std::string& dir);

}  // namespace tandem::lilicorr
