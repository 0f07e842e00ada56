// Entry point of libtandem-mamba2.so: one layer provider, "mamba2" on "cpu".
#include "mixer_cpu.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"

namespace {
using MakeFactory = tandem::Factory<tandem::LayerFactory, tandem::mamba2::Mamba2Factory>;
const tandem_provider kProviders[] = {
    {TANDEM_KIND_LAYER, "mamba2", "cpu", &MakeFactory::create, &MakeFactory::destroy}};
}  // namespace

TANDEM_DEFINE_PLUGIN("mamba2", "0.1.0", nullptr, kProviders)
