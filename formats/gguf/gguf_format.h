// The GGUF WeightFormat: opens GGUF files and loads tensors of any ggml type that has CPU kernels
// (quant.h) as a QuantizedTensor that multiplies straight from the file's blocks.
// Owner: checkpoints and tensors it returns belong to the caller; tensors borrow the checkpoint's
// bytes. Thread: const methods from any thread. Sync: matmul returns when done (CPU).
#pragma once
#include <memory>
#include <string>

#include "quant.h"
#include "tandem/weights.h"

namespace tandem::gguf {

// Activations. By default a matmul multiplies fp32 activations by the exactly decoded weights. With
// TANDEM_GGUF_ACTIVATIONS=llama in the environment when a tensor loads, its CPU matmul instead rounds
// each activation row as llama.cpp's CPU path does (QuantType::act: Q8_0, Q8_K, F16 or BF16 by weight
// type) and multiplies with QuantType::dot_act, to compare logits with llama.cpp's (the oracle;
// docs/gguf-oracle.md has how closely they agree). Slower on the CPU. On CUDA (gguf_format_cuda.cu)
// only IQ2_XXS has llama-mode kernels (llama_act_cuda.h, the CPU's bits); other types keep their fp32
// path there, and the load says so once per type on stderr.
// "f32" or unset is the default; any other value is a load error.
class GgufFormat final : public WeightFormat {
 public:
  int probe_path(const std::string& path) const override;
  std::unique_ptr<Checkpoint> open(const std::string& path) const override;
  // The group's `weight` member (or, without one, the tensor named by the prefix) decides: 20 when
  // find_type knows its dtype and it lies in an open GGUF file (above safetensors' 10, so GGUF's
  // F32/F16/BF16 tensors come here); 5 for a known dtype from another container (a fallback that
  // leaves dense safetensors weights to their own format); else 0.
  int probe_group(const TensorGroup& group) const override;
  // CPU only. An unsupported ggml type is an error naming the tensor and the type.
  std::unique_ptr<QuantizedTensor> load(const TensorGroup& group, Backend& backend) const override;
};

// A weight in ggml blocks. Rows run along the last PyTorch dimension (ggml ne[0]). An optional F32
// `scale` member (NVFP4's per-tensor scale) multiplies every output, and likewise every value that
// get_rows and dequantize return, so the three views show one matrix.
class GgufTensor final : public QuantizedTensor {
 public:
  // `scale` may be null. Errors name the tensor: shape/size mismatch, ne[0] not a whole number of blocks.
  // `llama_activations`: round activations as llama.cpp does (see GgufFormat).
  GgufTensor(const RawTensor& raw, const QuantType& type, const RawTensor* scale, bool llama_activations = false);

  std::string type_name() const override { return type_.name; }
  size_t bytes() const override { return nbytes_; }
  void get_rows(const int32_t* ids, int n, const Tensor& out) const override;
  void dequantize(float* out_host) const override;
  float scale() const { return scale_; }

 protected:
  // y[i, r] = dot(row r, x_i)·scale: parallel over weight rows; each element is one QuantType::dot
  // call whatever the batch size or split (batch invariance).
  void matmul_raw(const Tensor& x, const Tensor& y) const override;

 private:
  // The llama.cpp-compatible matmul: each row of x rounded once to type_.act, then dot_act per output.
  void matmul_llama(const Tensor& x, const Tensor& y) const;

  std::string name_;
  const QuantType& type_;
  const uint8_t* data_;
  size_t nbytes_;
  int64_t row_len_;    // elements per row (ggml ne[0])
  int64_t n_rows_;     // rows of row_len_ elements
  int64_t row_bytes_;
  float scale_ = 1.0f;
  bool llama_activations_ = false;
};

// TANDEM_GGUF_ACTIVATIONS read now: true for "llama", false for "f32" or unset; else an error.
bool llama_activations_requested();

}  // namespace tandem::gguf
