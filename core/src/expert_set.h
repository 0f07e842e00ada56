// The generic ExpertSet: one QuantizedTensor per expert, rows gathered on the host. What the core
// builds when a format has no load_experts(); host memory only (the CPU backend).
#pragma once
#include <memory>
#include <vector>

#include "tandem/weights.h"

namespace tandem {

class Backend;

std::unique_ptr<ExpertSet> make_per_expert_set(std::vector<std::unique_ptr<QuantizedTensor>> experts,
                                               Backend& backend);

}  // namespace tandem
