// Entry point of libtandem-spec-lookup.so: one device-neutral speculator provider, "lookup".
#include "lookup.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"

namespace {
using MakeFactory = tandem::Factory<tandem::SpeculatorFactory, tandem::lookup::LookupFactory>;
const tandem_provider kProviders[] = {
    {TANDEM_KIND_SPECULATOR, "lookup", "", &MakeFactory::create, &MakeFactory::destroy}};
}  // namespace

TANDEM_DEFINE_PLUGIN("spec-lookup", "0.1.0", nullptr, kProviders)
