// Entry point of libtandem-exl3.so: one format provider, device-neutral by name (CPU kernels).
#include "formats/exl3/exl3_format.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"

namespace {

using Factory = tandem::Factory<tandem::WeightFormat, tandem::exl3::Exl3Format>;
const tandem_provider kProviders[] = {
    {TANDEM_KIND_FORMAT, "exl3", "", &Factory::create, &Factory::destroy},
};

}  // namespace

TANDEM_DEFINE_PLUGIN("exl3", "0.1.0", nullptr, kProviders)
