// EXL3 weights on a CUDA device: the trellis words uploaded as stored, suh/svh (legacy sign bits
// expanded) and bias as f32, multiplied by the kernels of matmul_cuda.cuh. The experts of one layer
// are one stacked device buffer, gathered by ids that stay on the device.
// Owner: each tensor owns its device buffers (from the backend's allocator) and host copies of its
// scales; nothing points into the checkpoint after loading. Thread: const methods from the engine
// thread. Sync: matmul and gather_matmul are queued on the CUDA stream and return at once; get_rows
// and dequantize wait (they download the trellis and reconstruct on the host).
#pragma once
#include <memory>
#include <vector>

#include "tandem/backend.h"
#include "tandem/weights.h"

namespace tandem::exl3 {

// `group` must hold an EXL3 linear (parse_group's checks and messages); `backend` is the CUDA backend.
std::unique_ptr<QuantizedTensor> load_exl3_cuda(const TensorGroup& group, Backend& backend);

// groups[e] is expert e: all of one K, codebook and shape (an error names the first that differs).
std::unique_ptr<ExpertSet> load_exl3_experts_cuda(const std::vector<TensorGroup>& groups, Backend& backend);

}  // namespace tandem::exl3
