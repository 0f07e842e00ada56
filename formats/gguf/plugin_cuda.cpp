// Entry point of libtandem-gguf-cuda.so: the "gguf" format for device "cuda". It reads GGUF files
// with the same container code as the CPU module and loads every block type it computes onto the
// GPU. Scores 0 (skipped) without a CUDA device, so the device-neutral module then serves alone.
#include "gguf_format.h"
#include "gguf_format_cuda.h"
#include "tandem/cuda/util.h"
#include "tandem/backend.h"
#include "tandem/error.h"
#include "tandem/plugin_util.h"
#include "tandem/registry.h"

namespace tandem::gguf {
namespace {

// The tensor a group multiplies with: prefix.weight, else the tensor named by the prefix; the
// `.scale` sidecar belongs to a `.weight` member only (as on the CPU).
const RawTensor* main_member(const TensorGroup& group) {
  const RawTensor* t = group.member("weight");
  return t ? t : group.member("");
}
const RawTensor* scale_member(const TensorGroup& group, const RawTensor* main) {
  return main == group.member("weight") ? group.member("scale") : nullptr;
}

const RawTensor& checked_main(const TensorGroup& group, const QuantType*& type) {
  const RawTensor* t = main_member(group);
  check(t != nullptr, "gguf (cuda): group ", group.describe(), " has no 'weight' or exact-name tensor");
  type = find_type(t->dtype);
  check(type != nullptr, "gguf: tensor '", t->name, "' has ggml type ", t->dtype,
        ", which tandem cannot compute (no kernel for it)");
  return *t;
}

class GgufCudaFormat final : public DeviceFormat<GgufFormat> {
 public:
  GgufCudaFormat() : DeviceFormat("cuda") {}

 protected:
  std::unique_ptr<QuantizedTensor> load_on_device(const TensorGroup& group, Backend& backend) const override {
    const QuantType* type = nullptr;
    const RawTensor& t = checked_main(group, type);
    return load_gguf_cuda(t, *type, scale_member(group, &t), backend);
  }

  std::unique_ptr<ExpertSet> load_experts_on_device(const std::vector<TensorGroup>& groups,
                                                    Backend& backend) const override {
    std::vector<const RawTensor*> experts, scales;
    for (const auto& g : groups) {
      const QuantType* type = nullptr;
      const RawTensor& t = checked_main(g, type);
      experts.push_back(&t);
      scales.push_back(scale_member(g, &t));
    }
    return load_gguf_experts_cuda(experts, scales, backend);
  }
};

}  // namespace
}  // namespace tandem::gguf

namespace {
using Factory = tandem::Factory<tandem::WeightFormat, tandem::gguf::GgufCudaFormat>;
const tandem_provider kProviders[] = {
    {TANDEM_KIND_FORMAT, "gguf", "cuda", &Factory::create, &Factory::destroy},
};
}  // namespace

TANDEM_PLUGIN_EXPORT int tandem_plugin_score(void) { return tandem::cuda::plugin_score(); }

TANDEM_DEFINE_PLUGIN("gguf-cuda", "0.1.0", nullptr, kProviders)
