// ModelOpt linears on a CUDA device, through the GGUF CUDA kernels (formats/gguf/gguf_format_cuda.h):
// NVFP4 repacked loss-free into GGUF NVFP4 blocks with weight_scale_2 as the `.scale` output factor
// (repack.h); FP8 with a scalar weight_scale as BF16 codes (exact) on the dense kernels with the scale
// as the output factor; FP8 with a per-row weight_scale dequantized to F32 (one rounding per value,
// as dequantize() does on the CPU) on the dense kernels. Routed experts become one stacked set.
// Owner: the returned objects own their device memory; nothing points into the checkpoint or the
// repack buffers after loading. Thread: the engine thread. Sync: loading waits for its uploads.
#pragma once
#include <memory>
#include <vector>

#include "tandem/backend.h"
#include "tandem/weights.h"

namespace tandem::nvfp4 {

// Errors as parse_group's, plus NVFP4 inputs per row not a multiple of 64 (the GGUF block).
std::unique_ptr<QuantizedTensor> load_modelopt_cuda(const TensorGroup& group, Backend& backend);
// groups[e] = expert e; every expert of one storage and shape, else an error naming the first that differs.
std::unique_ptr<ExpertSet> load_modelopt_experts_cuda(const std::vector<TensorGroup>& groups, Backend& backend);

}  // namespace tandem::nvfp4
