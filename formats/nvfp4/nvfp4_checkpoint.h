// A ModelOpt checkpoint: a safetensors folder (one file or sharded by an index, read by the
// safetensors container code) plus its quantization config (modelopt_config.h), held to each other
// when it opens.
// Owner: the checkpoint owns the safetensors checkpoint it wraps. Thread: open on one thread; read
// from any. Sync: none.
#pragma once
#include <memory>
#include <string>

#include "formats/nvfp4/modelopt_config.h"
#include "tandem/weights.h"

namespace tandem::nvfp4 {

// 110 (above safetensors' 100) for what the safetensors reader opens (a folder, a .safetensors or
// index file) when its folder holds a ModelOpt config in either form; else 0.
int probe_modelopt_path(const std::string& path);

// How a module is stored in `c` judging by its tensors: NVFP4 (U8 weight), FP8 (F8_E4M3 weight),
// Dense (BF16/F16/F32 weight); nullopt for other dtypes.
std::optional<Storage> stored_as(const RawTensor& weight);

// Every module's stored form against the config: a module matched by an exclude/ignore pattern must
// be dense; under MIXED_PRECISION a quantized module must be listed in quantized_layers with its
// stored form, and a listed module must not be dense; under a uniform quant_algo every quantized
// module must be of that form. Errors name the config file, the module, the pattern or entry, and the
// file holding the tensor.
void check_against_config(const Checkpoint& ckpt, const QuantConfig& config);

// Opens `path` as safetensors and checks it against the folder's config (errors as above and
// read_quant_config's).
std::unique_ptr<Checkpoint> open_modelopt(const std::string& path);

}  // namespace tandem::nvfp4
