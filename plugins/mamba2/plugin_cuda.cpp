// Entry point of libtandem-mamba2-cuda.so: "mamba2" on "cuda". Scores 0 (skipped) without a device.
#include "tandem/cuda/util.h"
#include "mixer_cuda.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"

namespace {
using MakeFactory = tandem::Factory<tandem::LayerFactory, tandem::mamba2::Mamba2CudaFactory>;
const tandem_provider kProviders[] = {
    {TANDEM_KIND_LAYER, "mamba2", "cuda", &MakeFactory::create, &MakeFactory::destroy}};
}  // namespace

TANDEM_PLUGIN_EXPORT int tandem_plugin_score(void) { return tandem::cuda::plugin_score(); }

TANDEM_DEFINE_PLUGIN("mamba2-cuda", "0.1.0", nullptr, kProviders)
