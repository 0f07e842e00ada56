// Model shapes for synthetic benchmarks (spec/nemotron_h.md § 13): tiny, Nano-3-like, Super and the
// Bolt-shape with its per-layer expert table, as ModelDescs, and the HF config.json that describes one.
// Owner: value types. Thread: any. Sync: none.
#pragma once
#include <string>
#include <vector>

#include "tandem/model_config.h"

namespace tandem::synth {

// "tiny", "nano", "bolt", "super".
const std::vector<std::string>& shape_names();

// The shape's layers and sizes. `uniform` gives every MoE layer one expert count and width (Bolt:
// 346 experts of 2304; tiny: 12 of 256) so that llama.cpp's scalar expert_count can describe it; it
// changes nothing for shapes that are uniform already. An unknown name is an error listing the names.
ModelDesc model_shape(const std::string& name, bool uniform = false);

// The first layer of a kind, or nullptr.
const LayerDesc* first_layer(const ModelDesc& d, LayerKind kind);

// True when every MoE layer has the same expert count, width, top-k, shared width and latent size.
bool moe_uniform(const ModelDesc& d);

// config.json text: model_type nemotron_h with hybrid_override_pattern, or nemotron_h_puzzle with
// one block_configs entry per layer when the MoE layers differ. parse_model_config reads it back to `d`.
std::string config_json(const ModelDesc& d);

}  // namespace tandem::synth
