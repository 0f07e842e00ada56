// Writing an MLX folder from a checkpoint of GGML blocks (a GGUF file opened by the gguf format):
// the inverse of mlx_checkpoint.h, with no requantization. IQ2_XXS → iq2_xxs mode (uint32 words +
// fp16 scales), NVFP4 → nvfp4 mode (uint32 words + E4M3 scales, the `.scale` sidecar as an amax-
// convention `global_scale`), Q8_0 → 8-bit affine with groups of 32 (u = q + 128, bias = −128·d);
// F32/F16/BF16 tensors are copied. Per-expert weights are stacked as mlx-lm does
// (`mixer.switch_mlp.fc1`/`fc2`). Output: config.json (the input's, plus the quantization block),
// model.safetensors, and the tokenizer side files the input has.
// Owner: the caller owns the checkpoint. Thread: one caller; transcoding fans out over the core's
// worker pool. Sync: the folder is complete when the call returns.
#pragma once
#include <string>

#include "tandem/weights.h"

namespace tandem::mlx {

// Writes into the folder `dir` (created if missing). Errors name the tensor: a ggml type MLX has no
// layout for here (anything but IQ2_XXS, NVFP4, Q8_0 and floats), experts of mixed types or shapes.
void write_mlx_folder(const Checkpoint& input, const std::string& dir);

}  // namespace tandem::mlx
