// Entry point of libtandem-safetensors.so: the format (device-neutral by name) and its container writer.
#include "safetensors_file_writer.h"
#include "safetensors_format.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"

namespace {

using Factory = tandem::Factory<tandem::WeightFormat, tandem::safetensors::SafetensorsFormat>;
using WriterFactory = tandem::Factory<tandem::Writer, tandem::safetensors::SafetensorsWriter>;
const tandem_provider kProviders[] = {
    {TANDEM_KIND_FORMAT, "safetensors", "", &Factory::create, &Factory::destroy},
    {TANDEM_KIND_WRITER, "safetensors", "", &WriterFactory::create, &WriterFactory::destroy},
};

}  // namespace

TANDEM_DEFINE_PLUGIN("safetensors", "0.1.0", nullptr, kProviders)
