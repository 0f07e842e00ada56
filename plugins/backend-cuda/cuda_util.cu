// device_count(): the one CUDA query every module's score export makes.
#include "cuda_util.cuh"

namespace tandem::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no device: clear the sticky error for later callers
    return 0;
  }
  return n;
}

}  // namespace tandem::cuda
