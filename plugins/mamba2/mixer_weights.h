// The weights of one Mamba2 layer as both mixers read them: the two projections from the format (on
// the loader's device), the small vectors as f32 host memory, checked against the layer's dims.
// Owner: the caller owns what load_weights returns. Thread: the loading thread. Sync: none.
#pragma once
#include <memory>
#include <vector>

#include "scan_cpu.h"
#include "tandem/layer.h"

namespace tandem::mamba2 {

struct Mamba2Weights {
  std::unique_ptr<QuantizedTensor> in_proj, out_proj;
  std::vector<float> in_bias, out_bias;  // only with desc.proj_bias
  std::vector<float> conv_w;             // [conv_dim, K]
  std::vector<float> conv_b;             // [conv_dim], empty without desc.conv_bias
  std::vector<float> dt_bias, a, d;      // [nh]; a = −exp(A_log) (on the host: one set of A bits for every
                                         // device) or GGUF's stored A
  std::vector<float> norm;               // [d_in]
};

// Errors name the weight: missing, or loaded with another shape or count than `dm` and `hidden` give.
Mamba2Weights load_weights(const MambaDesc& desc, const Dims& dm, int hidden, WeightLoader& weights);

}  // namespace tandem::mamba2
