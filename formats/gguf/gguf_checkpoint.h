// A GGUF file opened as a Checkpoint: tensors under their HF names with PyTorch shapes (stacked
// experts split into one view per expert), a synthesized config.json, tokenizer side files, and a
// gguf-dump style listing.
// Owner: the checkpoint owns the file; its RawTensors point into the file's bytes. Thread: open on
// one thread; a finished checkpoint may be read from any thread. Sync: none.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>

#include "gguf_config.h"
#include "gguf_file.h"
#include "tandem/weights.h"

namespace tandem::gguf {

class GgufCheckpoint final : public Checkpoint {
 public:
  // Reads the architecture (errors for other architectures and missing keys) and names the tensors.
  explicit GgufCheckpoint(std::unique_ptr<GgufFile> file);

  std::string path() const override { return file_->path(); }
  std::string config_json() const override;
  const std::vector<RawTensor>& tensors() const override { return tensors_; }
  const RawTensor* find(const std::string& name) const override;
  // "tokenizer.json" and "tokenizer_config.json" from tokenizer.* metadata; nullopt otherwise.
  std::optional<std::string> side_file(const std::string& name) const override;
  // Metadata (long arrays abbreviated) and the ggml tensor table: name, type, ne, offset, bytes.
  std::string dump() const override;

  const GgufFile& file() const { return *file_; }
  const Architecture& architecture() const { return arch_; }

 private:
  void add(RawTensor t, const std::string& ggml_name);
  void add_tensor(const TensorInfo& t);

  std::unique_ptr<GgufFile> file_;
  Architecture arch_;
  std::string config_;
  std::vector<RawTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

// Opens a .gguf file. Every error is one line naming the file and the key or tensor.
std::unique_ptr<GgufCheckpoint> open_checkpoint(const std::string& path);

// 100 for a file that starts with the GGUF magic or a path ending in ".gguf"; else 0.
int probe_checkpoint(const std::string& path);

}  // namespace tandem::gguf
