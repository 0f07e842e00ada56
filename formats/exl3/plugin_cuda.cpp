// Entry point of libtandem-exl3-cuda.so: the "exl3" format for device "cuda". It claims the same
// groups as the CPU module and loads them onto the GPU; for another device it hands over to the CPU
// format. Scores 0 (skipped) without a CUDA device, so the device-neutral module then serves alone.
#include "formats/exl3/exl3_format.h"
#include "formats/exl3/exl3_format_cuda.h"
#include "tandem/cuda/util.h"
#include "tandem/backend.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"

namespace tandem::exl3 {
namespace {

class Exl3CudaFormat final : public DeviceFormat<Exl3Format> {
 public:
  Exl3CudaFormat() : DeviceFormat("cuda") {}

 protected:
  std::unique_ptr<QuantizedTensor> load_on_device(const TensorGroup& group, Backend& backend) const override {
    return load_exl3_cuda(group, backend);
  }
  std::unique_ptr<ExpertSet> load_experts_on_device(const std::vector<TensorGroup>& groups,
                                                    Backend& backend) const override {
    return load_exl3_experts_cuda(groups, backend);
  }
};

}  // namespace
}  // namespace tandem::exl3

namespace {
using Factory = tandem::Factory<tandem::WeightFormat, tandem::exl3::Exl3CudaFormat>;
const tandem_provider kProviders[] = {
    {TANDEM_KIND_FORMAT, "exl3", "cuda", &Factory::create, &Factory::destroy},
};
}  // namespace

TANDEM_PLUGIN_EXPORT int tandem_plugin_score(void) { return tandem::cuda::plugin_score(); }

TANDEM_DEFINE_PLUGIN("exl3-cuda", "0.1.0", nullptr, kProviders)
