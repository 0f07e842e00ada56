// SafetensorsFormat: glue from the WeightFormat interface to the reader and the dense CPU kernels.
#include "safetensors_format.h"

#include "dense_cpu.h"
#include "safetensors_checkpoint.h"
#include "tandem/backend.h"
#include "tandem/error.h"

namespace tandem::safetensors {
namespace {

// The tensor a group multiplies with: prefix.weight, else the tensor named by the prefix.
const RawTensor* main_member(const TensorGroup& group) {
  const RawTensor* t = group.member("weight");
  return t ? t : group.member("");
}

}  // namespace

int SafetensorsFormat::probe_path(const std::string& path) const { return probe_checkpoint(path); }

std::unique_ptr<Checkpoint> SafetensorsFormat::open(const std::string& path) const { return open_checkpoint(path); }

int SafetensorsFormat::probe_group(const TensorGroup& group) const {
  const RawTensor* t = main_member(group);
  return t && is_dense_dtype(t->dtype) ? 10 : 0;
}

std::unique_ptr<QuantizedTensor> SafetensorsFormat::load(const TensorGroup& group, Backend& backend) const {
  std::string device = backend.device();
  check(device == "cpu", "safetensors: no kernels for device '", device, "' (loading ", group.describe(), ")");
  const RawTensor* t = main_member(group);
  check(t && is_dense_dtype(t->dtype), "safetensors: group ", group.describe(),
        " has no BF16, F16 or F32 'weight' or exact-name tensor");
  return std::make_unique<DenseTensor>(*t);
}

}  // namespace tandem::safetensors
