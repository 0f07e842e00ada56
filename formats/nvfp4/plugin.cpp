// Entry point of libtandem-nvfp4.so: the "nvfp4" format (ModelOpt checkpoints, CPU kernels).
#include "formats/nvfp4/nvfp4_format.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"

namespace {

using Factory = tandem::Factory<tandem::WeightFormat, tandem::nvfp4::Nvfp4Format>;
const tandem_provider kProviders[] = {
    {TANDEM_KIND_FORMAT, "nvfp4", "", &Factory::create, &Factory::destroy},
};

}  // namespace

TANDEM_DEFINE_PLUGIN("nvfp4", "0.1.0", nullptr, kProviders)
