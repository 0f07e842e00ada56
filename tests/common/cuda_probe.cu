// cuda_unavailable(): the device count, then a context on device 0 (a driver that counts devices but
// cannot start one fails there), each CUDA error named.
#include <cuda_runtime.h>

#include "cuda_probe.h"

namespace tandem::test {

namespace {

std::string named(const char* what, cudaError_t e) {
  (void)cudaGetLastError();  // clear a sticky error for the test's own calls
  return std::string(what) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

}  // namespace

std::string cuda_unavailable() {
  static const std::string cause = [] {
    int n = 0;
    if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess) return named("cudaGetDeviceCount", e);
    if (n == 0) return std::string("no CUDA device (cudaGetDeviceCount found 0)");
    if (cudaError_t e = cudaFree(nullptr); e != cudaSuccess) return named("creating a CUDA context on device 0", e);
    return std::string();
  }();
  return cause;
}

}  // namespace tandem::test
