// NumPy .npy v1.0 files of little-endian float32, C order: how logits leave and enter tandem.
// Owner: value types. Thread: any. Sync: none.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/plugin_abi.h"

namespace tandem {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

TANDEM_API void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape);
TANDEM_API NpyArray read_npy(const std::string& path);

}  // namespace tandem
