// Exl3Format: glue from the WeightFormat interface to the group parser and the CPU tensor.
#include "formats/exl3/exl3_format.h"

#include "formats/exl3/exl3_cpu.h"
#include "formats/exl3/trellis.h"
#include "tandem/backend.h"
#include "tandem/error.h"

namespace tandem::exl3 {

int Exl3Format::probe_group(const TensorGroup& group) const {
  if (is_exl3_group(group)) return 30;
  return group.member("trellis") ? 1 : 0;
}

std::unique_ptr<QuantizedTensor> Exl3Format::load(const TensorGroup& group, Backend& backend) const {
  const std::string device = backend.device();
  check(device == "cpu", "exl3: no kernels for device '", device, "' (loading ", group.describe(), ")");
  return std::make_unique<Exl3Tensor>(group);
}

}  // namespace tandem::exl3
