// An MLX folder (config.json with MLX's `quantization` block, safetensors files of uint32 words plus
// `scales`/`biases`) opened as a Checkpoint whose quantized weights are GGML blocks: each quantized
// module is transcoded once, at open, into host memory (mlx_repack.h), and presented under HF names
// with the GGUF type as dtype ("IQ2_XXS", "NVFP4" with its F32 `.scale`, "Q8_0"), so the gguf format
// plugins (CPU and CUDA) claim and run them. Float tensors (BF16, F16, F32) point into the mapped files.
// mlx-lm's stacked experts (`mixer.switch_mlp.fc1`/`fc2`, [E, N, …]) become one view per expert
// (`mixer.experts.j.up_proj`/`down_proj`), as the GGUF reader presents stacked experts.
// Owner: the checkpoint owns its mappings and transcoded buffers; RawTensors point into them. The
// transcoded copy costs host memory about the size of the quantized payload for the checkpoint's life.
// Thread: open on one thread; read from any. Sync: none.
#pragma once
#include <memory>
#include <string>

#include "tandem/weights.h"

namespace tandem::mlx {

// 150 for a folder holding config.json and safetensors files where either the config carries MLX's
// quantization block and a tensor is named `*.scales`, or a tensor is named `*.switch_mlp.*`
// (above safetensors' 100, so such folders come here without a flag); else 0.
int probe_folder(const std::string& path);

// Opens an MLX folder. One-line errors name the file and tensor: scales missing or of the wrong
// shape or dtype, an unknown mode, an 8-bit affine group that is not a Q8_0 transcode, a uint32
// weight that no quantization describes.
std::unique_ptr<Checkpoint> open_folder(const std::string& path);

}  // namespace tandem::mlx
