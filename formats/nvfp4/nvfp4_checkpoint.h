// A ModelOpt checkpoint: a safetensors folder (one file or sharded by an index, read by the
// safetensors container code) plus its quantization config (modelopt_config.h), held to each other
// when it opens.
// Owner: the checkpoint owns the safetensors checkpoint it wraps. Thread: open on one thread; read
// from any. Sync: none.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/nvfp4/modelopt_config.h"
#include "tandem/weights.h"

namespace tandem::nvfp4 {

// 110 (above safetensors' 100) for what the safetensors reader opens (a folder, a .safetensors or
// index file) when its folder holds a ModelOpt config in either form; else 0.
int probe_modelopt_path(const std::string& path);

// How a module is stored in `c` judging by its tensors: NVFP4 (U8 weight), FP8 (F8_E4M3 weight),
// Dense (BF16/F16/F32 weight); nullopt for other dtypes.
std::optional<Storage> stored_as(const RawTensor& weight);

// Every module's stored form against the config: a module matched by an exclude/ignore pattern must
// be dense; under MIXED_PRECISION a quantized module must be listed in quantized_layers with its
// stored form, and a listed module must not be dense; under a uniform quant_algo every quantized
// module must be of that form. Errors name the config file, the module, the pattern or entry, and the
// file holding the tensor.
void check_against_config(const Checkpoint& ckpt, const QuantConfig& config);

// Tensors of the file that the text model does not use, skipped as one group each: the MTP head
// (`mtp.*`), the vision tower and projector (`vision_model.*`, `mlp1.*`) and an audio encoder
// (`sound_encoder.*`) of NVIDIA's vision-language wrapper (docs/formats-nvfp4.md § Super VL).
struct SkippedPart {
  std::string what;    // "MTP layer", "vision tower and projector", "audio encoder"
  std::vector<std::string> prefixes;  // as stored: {"language_model.mtp."}, {"vision_model.", "mlp1."}
  size_t tensors = 0, bytes = 0;
};

// A ModelOpt checkpoint as the model loader sees it: the text model's tensors under their HF names.
// In a vision-language wrapper (tensors under `language_model.`, vision under `vision_model.` and
// `mlp1.`, as vLLM's nano_nemotron_vl.py loads them) the `language_model.` prefix is dropped; MTP,
// vision and audio tensors are left out with one info note per part; a wrapper tensor under any other
// prefix is an error naming it. Every stored tensor, skipped or not, was first held to the config
// (check_against_config, which sees the names as stored).
class ModeloptCheckpoint final : public Checkpoint {
 public:
  ModeloptCheckpoint(std::unique_ptr<Checkpoint> inner, QuantConfig config);
  std::string path() const override { return inner_->path(); }
  std::string config_json() const override { return inner_->config_json(); }
  const std::vector<RawTensor>& tensors() const override { return tensors_; }
  const RawTensor* find(const std::string& name) const override;
  std::optional<std::string> side_file(const std::string& name) const override { return inner_->side_file(name); }
  std::string dump() const override;

  const QuantConfig& config() const { return config_; }
  // "language_model." for a vision-language wrapper, else "".
  const std::string& text_prefix() const { return text_prefix_; }
  // The parts left out, in the order above; empty when the file holds the text model only.
  const std::vector<SkippedPart>& skipped() const { return skipped_; }

 private:
  std::unique_ptr<Checkpoint> inner_;
  QuantConfig config_;
  std::string text_prefix_;
  std::vector<RawTensor> tensors_;  // copies of the inner tensors' descriptions, renamed; data stays in inner_
  std::map<std::string, size_t> by_name_;
  std::vector<SkippedPart> skipped_;
};

// Opens `path` as safetensors and checks it against the folder's config (errors as above and
// read_quant_config's), then wraps it as a ModeloptCheckpoint.
std::unique_ptr<Checkpoint> open_modelopt(const std::string& path);

}  // namespace tandem::nvfp4
