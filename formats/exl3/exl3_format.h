// The EXL3 WeightFormat: claims the tensor group of one exllamav3-quantized linear (trellis with
// suh/su and svh/sv, optional bias and codebook marker) inside any container, and loads it for the
// CPU. EXL3 packs are safetensors folders, so this plugin reads no container of its own.
// Owner: tensors it returns belong to the caller and borrow the checkpoint's bytes. Thread: const
// methods from any thread. Sync: none.
#pragma once
#include <memory>

#include "tandem/weights.h"

namespace tandem::exl3 {

class Exl3Format final : public WeightFormat {
 public:
  // 30 for a group with trellis, suh/su and svh/sv (above safetensors' 10 and GGUF's 20); 1 for a
  // group with a trellis but missing scales, so that load() names what is missing instead of the
  // loader reporting an unclaimed group; else 0.
  int probe_group(const TensorGroup& group) const override;
  // CPU only: an Exl3Tensor. Errors name the tensor (see parse_group) or the device.
  std::unique_ptr<QuantizedTensor> load(const TensorGroup& group, Backend& backend) const override;
};

}  // namespace tandem::exl3
