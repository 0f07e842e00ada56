// Entry point of libtandem-nvfp4-cuda.so: the "nvfp4" format for device "cuda". It reads and claims
// exactly what the CPU module does and loads onto the GPU through the GGUF kernels
// (nvfp4_format_cuda.h); for another device it hands over to the CPU format. Scores 0 (skipped)
// without a CUDA device, so the device-neutral module then serves alone.
#include "formats/nvfp4/nvfp4_format.h"
#include "formats/nvfp4/nvfp4_format_cuda.h"
#include "tandem/backend.h"
#include "tandem/cuda/util.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"

namespace tandem::nvfp4 {
namespace {

class Nvfp4CudaFormat final : public DeviceFormat<Nvfp4Format> {
 public:
  Nvfp4CudaFormat() : DeviceFormat("cuda") {}

 protected:
  std::unique_ptr<QuantizedTensor> load_on_device(const TensorGroup& group, Backend& backend) const override {
    return load_modelopt_cuda(group, backend);
  }
  std::unique_ptr<ExpertSet> load_experts_on_device(const std::vector<TensorGroup>& groups,
                                                    Backend& backend) const override {
    return load_modelopt_experts_cuda(groups, backend);
  }
};

}  // namespace
}  // namespace tandem::nvfp4

namespace {
using Factory = tandem::Factory<tandem::WeightFormat, tandem::nvfp4::Nvfp4CudaFormat>;
const tandem_provider kProviders[] = {
    {TANDEM_KIND_FORMAT, "nvfp4", "cuda", &Factory::create, &Factory::destroy},
};
}  // namespace

TANDEM_PLUGIN_EXPORT int tandem_plugin_score(void) { return tandem::cuda::plugin_score(); }

TANDEM_DEFINE_PLUGIN("nvfp4-cuda", "0.1.0", nullptr, kProviders)
