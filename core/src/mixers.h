// The mixers the core builds from backend ops and weight matmuls: attention, MoE, dense MLP.
// (The Mamba2 mixer comes from a layer plugin.)
#pragma once
#include <memory>

#include "tandem/layer.h"

namespace tandem {

struct MixerScratch;

// Each mixer declares its scratch in `scratch` (the Model's, shared by all layers), which must outlive
// it and be reserved for a pass's tokens before the pass (MixerScratch::reserve).
// pos0_device: int64[Model::batch_max_rows] in the backend's memory holding each pass's first position
// (ForwardInfo::pos0; sequence b of a forward_batch at entry b), written by the Model before the pass.
std::unique_ptr<Mixer> make_attention(const AttentionDesc& d, int hidden, WeightLoader& w, Backend& be,
                                      const int64_t* pos0_device, MixerScratch& scratch);
std::unique_ptr<Mixer> make_moe(const MoEDesc& d, int hidden, WeightLoader& w, Backend& be, MixerScratch& scratch);
std::unique_ptr<Mixer> make_mlp(const MLPDesc& d, int hidden, WeightLoader& w, Backend& be, MixerScratch& scratch);

}  // namespace tandem
