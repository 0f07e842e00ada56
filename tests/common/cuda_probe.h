// Whether this process can use a CUDA device, for the GPU tests (tests/common/cuda_probe.cu, linked
// into every test labelled gpu): TANDEM_SKIP_WITHOUT_CUDA() skips, or fails under TANDEM_REQUIRE_GPU=1,
// naming the cause (no device, or the CUDA error that cudaGetDeviceCount or creating the context gave).
// Owner: none. Thread: any (the probe runs once). Sync: a function-local static.
#pragma once
#include <string>

#include "gpu_required.h"

namespace tandem::test {

// "" when a CUDA device is usable; else one line naming why not.
std::string cuda_unavailable();

}  // namespace tandem::test

#define TANDEM_SKIP_WITHOUT_CUDA()                                                     \
  do {                                                                                 \
    const std::string tandem_cuda_cause_ = ::tandem::test::cuda_unavailable();         \
    if (!tandem_cuda_cause_.empty()) TANDEM_GPU_UNAVAILABLE(tandem_cuda_cause_);       \
  } while (0)
