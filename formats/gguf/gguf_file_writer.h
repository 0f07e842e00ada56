// The gguf plugin's Writer (tandem/writer.h): streamed GGUF v3 files whose header describes a
// ModelDesc in llama.cpp's nemotron_h_moe keys and carries a byte-level BPE vocabulary, and random
// valid blocks of the ggml types synthetic models use (Q8_0, IQ4_NL, IQ2_XXS, NVFP4).
// Owner: value type. Thread: const methods from any thread (the block calibration is computed once,
// locked). Sync: files are complete when close returns.
#pragma once
#include <string>

#include "gguf_metadata.h"
#include "tandem/writer.h"

namespace tandem::gguf {

class GgufWriter final : public Writer {
 public:
  std::string extension() const override { return ".gguf"; }
  std::optional<TypeLayout> type_layout(const std::string& dtype) const override;
  std::unique_ptr<TensorFile> create(const std::string& path, const std::vector<TensorSpec>& tensors,
                                     const FileInfo& info) const override;
  bool random_blocks(const std::string& dtype, double rms, Rng& rng, uint8_t* out, int64_t n_blocks) const override;
  std::optional<float> companion_scale(const std::string& dtype, double rms) const override;

 protected:
  int64_t shape_row(const TensorSpec& t) const override { return t.shape.front(); }  // ggml ne[0]
};

// The header metadata for `info`: general.*, nemotron_h_moe.* (per-layer expert counts and widths as
// arrays when the MoE layers differ, scalars when they do not) and tokenizer.* from the vocabulary.
Metadata model_metadata(const FileInfo& info);

}  // namespace tandem::gguf
