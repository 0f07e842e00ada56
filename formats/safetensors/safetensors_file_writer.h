// The safetensors plugin's Writer (tandem/writer.h): streamed .safetensors files and the shard index
// of a folder, through safetensors_writer's header and index code.
// Owner: value type. Thread: const methods from any thread. Sync: files are complete when close returns.
#pragma once
#include "tandem/writer.h"

namespace tandem::safetensors {

class SafetensorsWriter final : public Writer {
 public:
  std::string extension() const override { return ".safetensors"; }
  std::optional<TypeLayout> type_layout(const std::string& dtype) const override;
  std::unique_ptr<TensorFile> create(const std::string& path, const std::vector<TensorSpec>& tensors,
                                     const FileInfo& info) const override;
  void write_index(const std::string& path,
                   const std::vector<std::pair<std::string, std::string>>& weight_map) const override;
};

}  // namespace tandem::safetensors
