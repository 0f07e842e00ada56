// Synthetic LiLiCorr checkpoints (random weights in the real layout) for tests and benchmarks:
// `tandem synth --drafter lilicorr` and the plugin's tests write them through this.
// Owner: value types. Thread: any. Sync: the folder is complete when write_synthetic returns.
#pragma once
#include <cstdint>
#include <string>

#include "backbone.h"
#include "head.h"
#include "tandem/model_config.h"

namespace tandem::lilicorr {

struct SynthGeometry {
  BackboneConfig backbone;
  HeadConfig head;
  double mlp_ratio = 2.0;
  int64_t vocab = 0;
  bool with_head = true;
  bool serving_names = false;  // false: the export (nn.Sequential) names
  bool bf16 = true;            // false: F32
  bool embed = false;          // write an own embed_tokens.weight [vocab, hidden] (kept BF16/F32)
  // Quantized modules: "none", "nvfp4" (ModelOpt: U8 weight, F8_E4M3 weight_scale, F32 weight_scale_2
  // and input_scale; hf_quant_config.json and config.json quantization_config) or "mlx-nvfp4" (MLX: U32
  // weight, U8 scales, F32 global_scale; config.json quantization). fc and the backbone's linears are
  // quantized unless a pattern of `exclude` (fnmatch, as ModelOpt's exclude_modules) names them; the
  // head (lilicorr.*) and the embedding are always excluded. The exclude list goes into the config.
  std::string quant = "none";
  std::vector<std::string> exclude;
};

// The patterns written as the exclude list: `g.exclude` and the head's and embedding's.
std::vector<std::string> synth_exclude(const SynthGeometry& g);

// "tiny" (spec/lilicorr.md oracle plan: 5 layers, 4 q / 2 kv heads of 16, head K 8 × width 32) or
// "bolt" (5 GQA layers of 32 q / 8 kv heads of 128, intermediate 12288, head K 8 × width 1024: about
// 1.1 B parameters, the card's size; the per-module widths are stand-ins, not published) for a target
// of shape `target` (width, vocabulary, layers for the taps).
SynthGeometry synth_geometry(const std::string& name, const ModelDesc& target);

// Parameters the checkpoint of `g` holds.
int64_t synth_parameters(const SynthGeometry& g);

// Writes config.json and model.safetensors into `dir` (created). Values depend only on `seed` and each
// tensor's export name, so both naming schemes hold the same bits.
void write_synthetic(const std::string& dir, const SynthGeometry& g, uint64_t seed);

}  // namespace tandem::lilicorr
