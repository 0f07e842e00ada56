// Entry point of libtandem-cpu.so: one backend provider. No score export: the CPU always runs.
#include "cpu_backend.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"

namespace {
using CpuFactory = tandem::Factory<tandem::Backend, tandem::cpu::CpuBackend>;
const tandem_provider kProviders[] = {
    {TANDEM_KIND_BACKEND, "cpu", "cpu", &CpuFactory::create, &CpuFactory::destroy}};
}  // namespace

TANDEM_DEFINE_PLUGIN("cpu", "0.1.0", nullptr, kProviders)
