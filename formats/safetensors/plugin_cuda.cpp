// Entry point of libtandem-safetensors-cuda.so: the "safetensors" format for device "cuda". It reads
// checkpoints with the same container code as the CPU module and loads dense weights onto the GPU.
// Scores 0 (skipped) without a CUDA device, so the device-neutral module then serves alone.
#include "dense_cpu.h"
#include "dense_cuda.h"
#include "safetensors_format.h"
#include "tandem/cuda/util.h"
#include "tandem/backend.h"
#include "tandem/error.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"

namespace tandem::safetensors {
namespace {

const RawTensor* main_member(const TensorGroup& group) {
  const RawTensor* t = group.member("weight");
  return t ? t : group.member("");
}

class CudaSafetensorsFormat final : public DeviceFormat<SafetensorsFormat> {
 public:
  CudaSafetensorsFormat() : DeviceFormat("cuda") {}

 protected:
  std::unique_ptr<QuantizedTensor> load_on_device(const TensorGroup& group, Backend& backend) const override {
    const RawTensor* t = main_member(group);
    check(t && is_dense_dtype(t->dtype), "safetensors (cuda): group ", group.describe(),
          " has no BF16, F16 or F32 'weight' or exact-name tensor");
    return load_dense_cuda(*t, backend);
  }

  std::unique_ptr<ExpertSet> load_experts_on_device(const std::vector<TensorGroup>& groups,
                                                    Backend& backend) const override {
    std::vector<const RawTensor*> experts;
    for (const auto& g : groups) {
      const RawTensor* t = main_member(g);
      check(t && is_dense_dtype(t->dtype), "safetensors (cuda): expert group ", g.describe(),
            " has no BF16, F16 or F32 'weight' or exact-name tensor");
      experts.push_back(t);
    }
    return load_dense_experts_cuda(experts, backend);
  }
};

}  // namespace
}  // namespace tandem::safetensors

namespace {
using Factory = tandem::Factory<tandem::WeightFormat, tandem::safetensors::CudaSafetensorsFormat>;
const tandem_provider kProviders[] = {
    {TANDEM_KIND_FORMAT, "safetensors", "cuda", &Factory::create, &Factory::destroy},
};
}  // namespace

TANDEM_PLUGIN_EXPORT int tandem_plugin_score(void) { return tandem::cuda::plugin_score(); }

TANDEM_DEFINE_PLUGIN("safetensors-cuda", "0.1.0", nullptr, kProviders)
