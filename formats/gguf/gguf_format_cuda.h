// GGUF weights on a CUDA device: the file's blocks uploaded as they are (plus the NVFP4 `.scale`
// sidecar) and multiplied by the CUDA kernels of quant_cuda.cuh; F32/F16/BF16 on the dense kernels of
// formats/safetensors. The experts of one layer are one stacked device buffer, gathered by ids that
// stay on the device.
// Owner: each tensor owns its device buffers (from the backend's allocator); nothing points into the
// checkpoint after loading. Thread: const methods from the engine thread. Sync: matmul, get_rows and
// gather_matmul are queued on the CUDA stream and return at once; dequantize waits (it downloads).
#pragma once
#include <memory>
#include <vector>

#include "quant.h"
#include "tandem/backend.h"
#include "tandem/weights.h"

namespace tandem::gguf {

// `raw` of a type find_type knows, `scale` its optional `.scale` sidecar; `backend` is the CUDA
// backend. Shape and size errors name the tensor (the CPU GgufTensor's checks).
std::unique_ptr<QuantizedTensor> load_gguf_cuda(const RawTensor& raw, const QuantType& type, const RawTensor* scale,
                                                Backend& backend);

// experts[e] is expert e's weight (all of one type and one 2-D shape), scales[e] its `.scale` or null.
// Views into one stacked file tensor are uploaded in one copy.
std::unique_ptr<ExpertSet> load_gguf_experts_cuda(const std::vector<const RawTensor*>& experts,
                                                  const std::vector<const RawTensor*>& scales, Backend& backend);

}  // namespace tandem::gguf
