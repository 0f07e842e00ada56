// NVIDIA ModelOpt's quantization config (spec/formats.md § 6.3), in either form: the legacy
// hf_quant_config.json ({"quantization": {"quant_algo", "group_size", "exclude_modules", …}}) or
// config.json's "quantization_config" with "quant_method": "modelopt". It says which module is stored
// how; the checkpoint (nvfp4_checkpoint.h) holds the tensors to it.
// Owner: plain values. Thread: any. Sync: none.
#pragma once
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tandem::nvfp4 {

// How a module's weight is stored.
enum class Storage { Dense, NVFP4, FP8 };
const char* storage_name(Storage s);  // "dense (BF16/F16/F32)", "NVFP4", "FP8"

struct QuantConfig {
  std::string file;        // the file it was read from, for messages
  std::string quant_algo;  // as written: "NVFP4", "W4A16_NVFP4", "FP8", "FP8_PER_CHANNEL_PER_TOKEN", "MIXED_PRECISION"
  int group_size = 16;
  std::vector<std::string> exclude;           // exclude_modules and ignore: module names with * and ? wildcards
  std::map<std::string, Storage> layers;      // MIXED_PRECISION's quantized_layers: module → storage
  std::string kv_cache_quant_algo;            // "" without one; recorded (the KV cache stays in f32/bf16)

  bool mixed() const { return quant_algo == "MIXED_PRECISION"; }
  // Storage of every quantized module under a uniform quant_algo (not for MIXED_PRECISION).
  Storage uniform() const;
  // The exclude pattern that names `module` (a wildcard match of the module or of a parent module),
  // or "" when none does.
  std::string excluded_by(const std::string& module) const;
};

// True when `dir` holds hf_quant_config.json or a config.json whose quantization_config says
// "quant_method": "modelopt" (whatever its quant_algo: read_quant_config then names what is wrong).
bool has_modelopt_config(const std::filesystem::path& dir);

// The config of `dir` (hf_quant_config.json first, then config.json), or nullopt when the folder has
// neither form. Errors, one line naming the file: unparsable JSON, a quant_algo tandem does not read
// (in the top level or in a quantized_layers entry), an NVFP4 group_size other than 16, a field of
// the wrong type.
std::optional<QuantConfig> read_quant_config(const std::filesystem::path& dir);

}  // namespace tandem::nvfp4
