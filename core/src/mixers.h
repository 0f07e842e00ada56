// The mixers the core builds from backend ops and weight matmuls: attention, MoE, dense MLP.
// (The Mamba2 mixer comes from a layer plugin.)
#pragma once
#include <memory>

#include "tandem/layer.h"

namespace tandem {

std::unique_ptr<Mixer> make_attention(const AttentionDesc& d, int hidden, WeightLoader& w, Backend& be);
std::unique_ptr<Mixer> make_moe(const MoEDesc& d, int hidden, WeightLoader& w, Backend& be);
std::unique_ptr<Mixer> make_mlp(const MLPDesc& d, int hidden, WeightLoader& w, Backend& be);

}  // namespace tandem
