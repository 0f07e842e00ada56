// Entry point of libtandem-safetensors.so: one format provider, device-neutral by name.
#include "safetensors_format.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"

namespace {

using Factory = tandem::Factory<tandem::WeightFormat, tandem::safetensors::SafetensorsFormat>;
const tandem_provider kProviders[] = {
    {TANDEM_KIND_FORMAT, "safetensors", "", &Factory::create, &Factory::destroy},
};

}  // namespace

TANDEM_DEFINE_PLUGIN("safetensors", "0.1.0", nullptr, kProviders)
