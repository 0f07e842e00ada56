// Entry point of libtandem-cuda.so: the "cuda" backend. Scores 0 (skipped) without a CUDA device.
#include "cuda_backend.h"
#include "tandem/cuda/util.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"

namespace {
using CudaFactory = tandem::Factory<tandem::Backend, tandem::cuda::CudaBackend>;
const tandem_provider kProviders[] = {
    {TANDEM_KIND_BACKEND, "cuda", "cuda", &CudaFactory::create, &CudaFactory::destroy}};
}  // namespace

TANDEM_PLUGIN_EXPORT int tandem_plugin_score(void) { return tandem::cuda::plugin_score(); }

TANDEM_DEFINE_PLUGIN("cuda", "0.1.0", nullptr, kProviders)
