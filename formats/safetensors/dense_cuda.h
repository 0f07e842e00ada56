// Dense BF16/F16/F32 weights on a CUDA device: the checkpoint's bytes uploaded as they are (no
// conversion), multiplied by the dense kernels (tandem/cuda/dense.cuh). Experts of one layer are
// stacked in one device buffer and gathered by ids that stay on the device.
// Owner: each tensor owns its device buffer (from the backend's allocator); nothing points into the
// checkpoint after loading. Thread: const methods from the engine thread. Sync: matmul, get_rows and
// gather_matmul are queued on the CUDA stream and return at once; dequantize waits (it downloads).
#pragma once
#include <memory>
#include <vector>

#include "tandem/backend.h"
#include "tandem/weights.h"

namespace tandem::safetensors {

// `raw` must be BF16, F16 or F32 and `backend` the CUDA backend.
std::unique_ptr<QuantizedTensor> load_dense_cuda(const RawTensor& raw, Backend& backend);

// Experts 0..E−1 (one RawTensor each, all of one dtype and one 2-D shape) as one stacked set.
std::unique_ptr<ExpertSet> load_dense_experts_cuda(const std::vector<const RawTensor*>& experts, Backend& backend);

}  // namespace tandem::safetensors
