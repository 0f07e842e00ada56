// The Nemotron-H architecture of a GGUF file (spec/nemotron_h.md § 10): per-layer kinds and sizes
// from `<arch>.*` metadata and tensor presence, and the HF config.json text the core parses.
// Owner: value types. Thread: any. Sync: none.
#pragma once
#include <string>

#include "gguf_file.h"
#include "tandem/model_config.h"

namespace tandem::gguf {

struct Architecture {
  std::string name;    // general.architecture: nemotron_h or nemotron_h_moe
  int n_blocks = 0;    // block_count: trunk layers plus appended MTP blocks
  ModelDesc model;     // the trunk (MTP blocks are not part of it)
  bool mixed = false;  // some layer kind has per-layer sizes that differ (→ nemotron_h_puzzle)
};

// Reads the architecture. Errors name the file and the key (missing, ill-typed, array of the wrong
// length, inconsistent sizes) or the tensor the layout was inferred from.
Architecture read_architecture(const GgufFile& file);

// HF config.json text for parse_model_config: model_type nemotron_h with hybrid_override_pattern, or
// nemotron_h_puzzle with one block_configs entry per layer when a kind's sizes vary across layers.
std::string hf_config_json(const Architecture& arch);

}  // namespace tandem::gguf
