// A safetensors checkpoint: one file, a folder of files, or a folder sharded by
// model.safetensors.index.json, opened as one table of named tensors.
// Owner: the checkpoint owns every mapping; its RawTensors point into them. Thread: open on one
// thread; a finished checkpoint may be read from any thread. Sync: none.
#pragma once
#include <memory>
#include <string>

#include "tandem/weights.h"

namespace tandem::safetensors {

constexpr const char* kIndexName = "model.safetensors.index.json";

// 100 for a folder holding the index or *.safetensors files, or for a .safetensors or
// .safetensors.index.json file; else 0.
int probe_checkpoint(const std::string& path);

// Opens `path`: a .safetensors file, an index file, or a folder. With an index, exactly the files it
// names are read and every tensor it lists must be found where it says; without one, every
// *.safetensors in the folder is read in name order. A tensor found in two files is an error.
std::unique_ptr<Checkpoint> open_checkpoint(const std::string& path);

}  // namespace tandem::safetensors
