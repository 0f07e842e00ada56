// Entry point of libtandem-spec-lilicorr.so: one device-neutral speculator provider, "lilicorr".
#include "drafter.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"

namespace {
using MakeFactory = tandem::Factory<tandem::SpeculatorFactory, tandem::lilicorr::LiliFactory>;
const tandem_provider kProviders[] = {
    {TANDEM_KIND_SPECULATOR, "lilicorr", "", &MakeFactory::create, &MakeFactory::destroy}};
}  // namespace

TANDEM_DEFINE_PLUGIN("spec-lilicorr", "0.1.0", nullptr, kProviders)
