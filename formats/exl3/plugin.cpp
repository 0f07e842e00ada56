// Entry point of libtandem-exl3.so: the format (device-neutral by name, CPU kernels) and its converter.
#include "formats/exl3/converter.h"
#include "formats/exl3/exl3_format.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"

namespace {

using Factory = tandem::Factory<tandem::WeightFormat, tandem::exl3::Exl3Format>;
using ConverterFactory = tandem::Factory<tandem::Converter, tandem::exl3::Exl3Converter>;
const tandem_provider kProviders[] = {
    {TANDEM_KIND_FORMAT, "exl3", "", &Factory::create, &Factory::destroy},
    {TANDEM_KIND_CONVERTER, "exl3", "", &ConverterFactory::create, &ConverterFactory::destroy},
};

}  // namespace

TANDEM_DEFINE_PLUGIN("exl3", "0.1.0", nullptr, kProviders)
