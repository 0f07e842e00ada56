// Entry point of libtandem-mlx.so: the MLX container (device-neutral) and the mlx converter.
#include "mlx_format.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"

namespace {

using Factory = tandem::Factory<tandem::WeightFormat, tandem::mlx::MlxFormat>;
using ConverterFactory = tandem::Factory<tandem::Converter, tandem::mlx::MlxConverter>;
const tandem_provider kProviders[] = {
    {TANDEM_KIND_FORMAT, "mlx", "", &Factory::create, &Factory::destroy},
    {TANDEM_KIND_CONVERTER, "mlx", "", &ConverterFactory::create, &ConverterFactory::destroy},
};

}  // namespace

TANDEM_DEFINE_PLUGIN("mlx", "0.1.0", nullptr, kProviders)
