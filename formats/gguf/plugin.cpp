// Entry point of libtandem-gguf.so: the format (device-neutral by name) and its container writer.
#include "gguf_file_writer.h"
#include "gguf_format.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"

namespace {

using Factory = tandem::Factory<tandem::WeightFormat, tandem::gguf::GgufFormat>;
using WriterFactory = tandem::Factory<tandem::Writer, tandem::gguf::GgufWriter>;
const tandem_provider kProviders[] = {
    {TANDEM_KIND_FORMAT, "gguf", "", &Factory::create, &Factory::destroy},
    {TANDEM_KIND_WRITER, "gguf", "", &WriterFactory::create, &WriterFactory::destroy},
};

}  // namespace

TANDEM_DEFINE_PLUGIN("gguf", "0.1.0", nullptr, kProviders)
