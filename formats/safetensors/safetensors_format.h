// The safetensors WeightFormat: opens safetensors checkpoints and loads dense BF16/F16/F32 weights
// for the CPU backend.
// Owner: checkpoints and tensors it returns belong to the caller; tensors borrow the checkpoint's
// mappings. Thread: const methods from any thread. Sync: none.
#pragma once
#include <memory>
#include <string>

#include "tandem/weights.h"

namespace tandem::safetensors {

class SafetensorsFormat final : public WeightFormat {
 public:
  int probe_path(const std::string& path) const override;
  std::unique_ptr<Checkpoint> open(const std::string& path) const override;
  // 10 when the group's `weight` member (or, without one, the tensor named by the prefix itself) is
  // BF16, F16 or F32; other members (biases, scales) are left to whoever loads them.
  int probe_group(const TensorGroup& group) const override;
  // CPU only for now; the tensor points into the checkpoint's mapping.
  std::unique_ptr<QuantizedTensor> load(const TensorGroup& group, Backend& backend) const override;
};

}  // namespace tandem::safetensors
