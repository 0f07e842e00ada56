// ModelOpt-quantized linears on the CPU (spec/formats.md § 6.1–6.2): NVFP4 (U8 packed E2M1 `weight`,
// F8_E4M3 `weight_scale` per 16 inputs, F32 scalar `weight_scale_2`, optional `input_scale`) and FP8
// (F8_E4M3 `weight`, F32 `weight_scale` scalar or per output row). Rows are decoded exactly to f32
// and multiplied by f32 dot products; the per-tensor (or per-row) scale multiplies each output.
// Owner: a tensor borrows the checkpoint's bytes (the Model keeps the checkpoint alive). Thread: const
// methods from any thread. Sync: matmul returns when done.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/nvfp4/modelopt_config.h"
#include "tandem/weights.h"

namespace tandem::nvfp4 {

constexpr int kGroup = 16;  // elements per NVFP4 block scale

// One quantized linear's tensors, checked.
struct Layout {
  Storage storage = Storage::NVFP4;  // NVFP4 or FP8
  std::string name;                  // the module ("backbone.layers.0.mixer.in_proj")
  std::string file;                  // the file holding its weight
  int64_t out = 0, in = 0;
  const uint8_t* q = nullptr;        // NVFP4: [out, in/2], element 2b low nibble of byte b; FP8: [out, in]
  const uint8_t* scales = nullptr;   // NVFP4: F8_E4M3 [out, in/16]
  std::vector<float> out_scale;      // [out]: weight_scale_2 (NVFP4), weight_scale (FP8, broadcast if scalar)
  float global_scale = 1.0f;         // NVFP4 weight_scale_2; FP8 the scalar weight_scale (1 when per row)
  bool per_row = false;              // FP8 with a [out] weight_scale
  std::optional<float> input_scale;  // recorded; weight-only decoding does not use it
  size_t bytes = 0;                  // stored bytes of weight and scales
};

// 40 for a group whose `weight` is U8 with a `weight_scale` or `weight_scale_2` beside it, or F8_E4M3
// (so that a missing scale is this format's error, not an unclaimed group); else 0.
int probe_modelopt_group(const TensorGroup& group);

// Checks every member and, when group.shape is set, the shape the model expects. Errors are one line
// naming the file and the tensor: a missing scale, a scale of the wrong dtype or shape, a negative or
// NaN block scale, a NaN FP8 weight, a weight of the wrong shape.
Layout parse_group(const TensorGroup& group);

// Row r decoded without its output scale: e2m1(q)·e4m3(s) (NVFP4) or e4m3(q) (FP8), exact in f32.
void decode_row(const Layout& l, int64_t r, float* out);

class ModeloptTensor final : public QuantizedTensor {
 public:
  explicit ModeloptTensor(const TensorGroup& group);

  std::string type_name() const override;  // "NVFP4", "FP8"
  size_t bytes() const override { return l_.bytes; }
  void get_rows(const int32_t* ids, int n, const Tensor& out) const override;
  // W[r, k] = decode_row(r)[k] · out_scale[r], one f32 product per value.
  void dequantize(float* out_host) const override;
  const Layout& layout() const { return l_; }

 protected:
  // y[i, r] = dot(decode_row(r), x_i) · out_scale[r]: parallel over weight rows, each row decoded once
  // per call and each output one fixed-order dot product whatever the number of rows (batch invariance).
  void matmul_raw(const Tensor& x, const Tensor& y) const override;

 private:
  Layout l_;
};

}  // namespace tandem::nvfp4
