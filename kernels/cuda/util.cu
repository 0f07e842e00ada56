// device_count(): the one CUDA query every module's score export makes.
#include "tandem/cuda/util.cuh"

#include <cstdlib>
#include <string>

namespace tandem::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no device: clear the sticky error for later callers
    return 0;
  }
  return n;
}

int sm_count() {
  static const int n = [] {
    int dev = 0, c = 0;
    check_cuda(cudaGetDevice(&dev), "cuda: device");
    check_cuda(cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, dev), "cuda: SM count");
    return c;
  }();
  return n;
}

bool env_is_one(const char* name) {
  const char* e = std::getenv(name);
  return e && e[0] == '1' && e[1] == '\0';
}

bool pdl_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("TANDEM_CUDA_PDL");
    if (env && std::string(env) == "0") return false;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return major >= 9;
  }();
  return on;
}

}  // namespace tandem::cuda
