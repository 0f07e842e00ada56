// Nvfp4Format: glue from the WeightFormat interface to the checkpoint and the CPU tensor.
#include "formats/nvfp4/nvfp4_format.h"

#include "formats/nvfp4/nvfp4_checkpoint.h"
#include "formats/nvfp4/nvfp4_cpu.h"
#include "tandem/backend.h"
#include "tandem/error.h"

namespace tandem::nvfp4 {

int Nvfp4Format::probe_path(const std::string& path) const { return probe_modelopt_path(path); }

std::unique_ptr<Checkpoint> Nvfp4Format::open(const std::string& path) const { return open_modelopt(path); }

int Nvfp4Format::probe_group(const TensorGroup& group) const { return probe_modelopt_group(group); }

std::unique_ptr<QuantizedTensor> Nvfp4Format::load(const TensorGroup& group, Backend& backend) const {
  const std::string device = backend.device();
  check(device == "cpu", "nvfp4: no kernels for device '", device, "' (loading ", group.describe(), ")");
  return std::make_unique<ModeloptTensor>(group);
}

}  // namespace tandem::nvfp4
