// Quantized drafter modules (docs/lilicorr.md § Checkpoints): NVFP4 linears in ModelOpt's layout
// (hf_quant_config.json or config.json `quantization_config`, read by formats/nvfp4's config reader)
// and in the MLX layouts (`quantization.mode` nvfp4: the same NVFP4 bytes; mxfp4: dequantized to BF16,
// no format runs it). Each quantized module becomes an f32 host tensor (its exact dequantized values,
// what the fp32 reference multiplies by) and, for NVFP4, the stored bytes that the target's own weight
// formats load (Model::load_weight: formats/nvfp4 on the CPU, its CUDA module on the GPU).
// Owner: Nvfp4Weight is immutable once read and shared by the host weights and their slices.
// Thread: load on one thread. Sync: none (host memory).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "device_backbone.h"
#include "formats/nvfp4/modelopt_config.h"
#include "host_ops.h"
#include "tandem/weights.h"

namespace tandem {
class Model;
}

namespace tandem::lilicorr {

constexpr int kNvfp4Group = 16;  // inputs per E4M3 block scale (ModelOpt group_size, MLX nvfp4 group_size)
constexpr int kMxfp4Group = 32;  // inputs per E8M0 block scale (MLX mxfp4)

// One NVFP4 linear as ModelOpt stores it: W[r, k] = e2m1(q[r, k]) · e4m3(scales[r, k/16]) · scale2.
struct Nvfp4Weight {
  std::string name;  // the module as stored ("layers.0.mlp.up_proj"), for messages
  std::string file;  // where it came from
  int64_t out = 0, in = 0;
  std::vector<uint8_t> q;       // [out, in/2]: element 2b in the low nibble of byte b
  std::vector<uint8_t> scales;  // F8_E4M3 [out, in/16], each ≥ 0 and not NaN
  float scale2 = 1.0f;          // weight_scale_2 (per tensor)
  std::optional<float> input_scale;  // recorded; weight-only matmuls do not use it

  // The values, one f32 product (e2m1·e4m3, exact) · scale2 each, as formats/nvfp4 dequantizes.
  std::vector<float> dequantize() const;
  // Rows r0 … r0 + n − 1; columns c0 … c0 + n − 1 (nullptr unless c0 and n are multiples of 16).
  std::shared_ptr<const Nvfp4Weight> rows(int64_t r0, int64_t n) const;
  std::shared_ptr<const Nvfp4Weight> cols(int64_t c0, int64_t n) const;
};

// How the folder's modules are quantized.
struct DrafterQuant {
  enum class Kind { None, Modelopt, Mlx };
  Kind kind = Kind::None;
  std::string file;  // the file the config was read from, for messages
  // ModelOpt: NVFP4 (or W4A16_NVFP4) everywhere, or MIXED_PRECISION whose entries are NVFP4; its
  // exclude patterns (fnmatch, exclude_modules and ignore) name modules that stay BF16.
  std::optional<nvfp4::QuantConfig> modelopt;
  // MLX: the global mode, group size and bits, and the per-module entries (mode "" = not quantized).
  struct MlxEntry {
    std::string mode;
    int group = 0, bits = 0;
  };
  std::string mlx_key;  // "quantization" or "quantization_config"
  MlxEntry mlx;
  std::map<std::string, MlxEntry> mlx_modules;
};

// The folder's quantization config: hf_quant_config.json, else config.json `quantization_config`
// (`quant_method: modelopt`) for ModelOpt; config.json `quantization` (or an MLX-keyed
// `quantization_config` without quant_method) for MLX. Errors name the file and the key: a quant_algo
// other than NVFP4 (FP8 drafter modules are not read), an NVFP4 group_size other than 16, a malformed
// exclude list, a quant_method that is neither.
DrafterQuant read_quant(const std::string& dir, const std::string& config_json);

// A tensor read from the folder: f32 values in their logical shape ([out, in] for a quantized
// linear), and for an NVFP4 module its stored form.
struct ReadTensor {
  std::string stored;  // the stored name of its weight (or of the tensor)
  std::vector<int64_t> shape;
  std::vector<float> data;
  std::shared_ptr<const Nvfp4Weight> nvfp4;
  bool mxfp4 = false;  // dequantized from MLX mxfp4
};

// Every tensor of the checkpoint `tensors` (as stored) under its stored name (a quantized module under
// `<module>.weight`), quantized modules decoded per `q`. Scale tensors are consumed by their module;
// FP8 KV-cache scales (`*.k_scale`, `*.v_scale`) are skipped. Errors, one line naming the tensor and the
// config key: a U8 weight without a quantization config, a missing or misshapen `weight_scale` /
// `weight_scale_2`, a negative or NaN scale, a scale with no weight, an MLX module whose mode is not
// nvfp4/mxfp4, a dtype that is not BF16/F16/F32.
std::vector<ReadTensor> read_quantized(const std::vector<RawTensor>& tensors, const DrafterQuant& q);

// W of a (possibly NVFP4) linear loaded by the target's formats. An NVFP4 linear goes to them in its
// ModelOpt form (the target's NVFP4 kernels run it); where no format takes it (none loaded, or a
// shape its kernels refuse), it is dequantized to BF16 with a one-line warning naming the tensor.
// Dense linears load as load_linear(…, const float*) does.
DeviceLinear load_linear(WeightSource& src, Model& target, const std::string& name, const Linear& l);

// Rows r0 … r0 + n − 1 of l (with their bias entries); columns c0 … c0 + n − 1 (with l's bias or
// without). The NVFP4 form follows; a column split off the 16-input groups dequantizes to BF16 with a
// one-line warning naming `name`.
Linear slice_rows(const Linear& l, int64_t r0, int64_t n);
Linear slice_cols(const Linear& l, int64_t c0, int64_t n, bool bias, const std::string& name);

// Values rounded to BF16 (round to nearest even), as f32.
std::vector<float> round_bf16(std::vector<float> v);

}  // namespace tandem::lilicorr
