// The "nvfp4" WeightFormat: reads NVIDIA ModelOpt checkpoints (safetensors folders with a ModelOpt
// quantization config; nvfp4_checkpoint.h) and claims their NVFP4 and FP8 linears (nvfp4_cpu.h). The
// dense BF16/F16/F32 modules of the same checkpoint stay with the safetensors format, which claims
// them by dtype (U8 and F8_E4M3 weights are never its), so the two agree on who loads what.
// Owner: checkpoints and tensors it returns belong to the caller; tensors borrow the checkpoint's
// bytes. Thread: const methods from any thread. Sync: none.
#pragma once
#include <memory>
#include <string>

#include "tandem/weights.h"

namespace tandem::nvfp4 {

class Nvfp4Format final : public WeightFormat {
 public:
  int probe_path(const std::string& path) const override;                    // probe_modelopt_path
  std::unique_ptr<Checkpoint> open(const std::string& path) const override;  // open_modelopt
  int probe_group(const TensorGroup& group) const override;                  // probe_modelopt_group
  // CPU only: a ModeloptTensor. Routed experts: the core's per-expert set of these.
  std::unique_ptr<QuantizedTensor> load(const TensorGroup& group, Backend& backend) const override;
};

}  // namespace tandem::nvfp4
