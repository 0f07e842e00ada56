// Entry point of libtandem-gguf.so: one format provider, device-neutral by name.
#include "gguf_format.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"

namespace {

using Factory = tandem::Factory<tandem::WeightFormat, tandem::gguf::GgufFormat>;
const tandem_provider kProviders[] = {
    {TANDEM_KIND_FORMAT, "gguf", "", &Factory::create, &Factory::destroy},
};

}  // namespace

TANDEM_DEFINE_PLUGIN("gguf", "0.1.0", nullptr, kProviders)
