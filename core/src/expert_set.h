// The generic ExpertSet: one QuantizedTensor per expert, rows gathered on the host. What the core
// builds when a format has no load_experts(); host memory only (the CPU backend).
#pragma once
#include <memory>
#include <vector>

#include "tandem/weights.h"

namespace tandem {

class Backend;
struct MixerScratch;

// Gathers one expert's rows into the gather_in/gather_out slots of `scratch` (the Model's, shared by
// all layers), which must outlive the set.
std::unique_ptr<ExpertSet> make_per_expert_set(std::vector<std::unique_ptr<QuantizedTensor>> experts,
                                               Backend& backend, MixerScratch& scratch);

}  // namespace tandem
