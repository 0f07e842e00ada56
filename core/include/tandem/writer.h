// Writing a format's container (TANDEM_KIND_WRITER): a Writer streams tensors into files of its
// own kind (safetensors, GGUF), so that a converter or the synthetic-model generator writes any
// container by name without including the format's headers. Optional synthesis hooks let a format
// make random, valid data of its own block types.
// Owner: the caller owns a TensorFile until close(); a Writer keeps nothing per file.
// Thread: a Writer's const methods from any thread; one TensorFile from one thread at a time.
// Sync: a file is complete (flushed and synced) when close() returns.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/backend.h"
#include "tandem/error.h"
#include "tandem/model_config.h"

namespace tandem {

// One tensor of a file: its dtype is the container's own type name ("BF16", "I16", "IQ2_XXS"); its
// shape is in the container's order (safetensors: PyTorch, outermost first; GGUF: ggml ne).
struct TensorSpec {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
};

// A type's storage: `block_elems` values (along the contiguous dimension) in `block_bytes` bytes.
struct TypeLayout {
  int64_t block_elems = 1;
  size_t block_bytes = 0;
};

// A byte-level BPE vocabulary, for containers that carry their tokenizer (GGUF).
struct Vocabulary {
  enum class Kind { Normal, Unknown, Control };
  std::vector<std::string> tokens;
  std::vector<Kind> kinds;  // one per token
  int32_t bos = -1, eos = -1, unknown = -1, padding = -1;
  bool add_bos = false;
};

// What a file says beyond its tensors. Containers that carry no metadata (safetensors) ignore it;
// GGUF writes the architecture of `model` in llama.cpp's keys and the vocabulary.
struct FileInfo {
  std::string name;                  // a model name for the header, or empty
  const ModelDesc* model = nullptr;  // nullptr: no architecture keys
  const Vocabulary* vocab = nullptr;
};

// A file being written: the tensors' bytes in the order given to Writer::create, in any chunking.
// The container's padding between tensors is the file's business.
class TensorFile {
 public:
  virtual ~TensorFile() = default;
  virtual void write(const void* data, size_t n) = 0;
  // Errors: fewer bytes written than the tensors hold; a failed flush (the message names the file).
  virtual void close() = 0;
};

class Writer {
 public:
  virtual ~Writer() = default;
  // The file name extension, with its dot (".safetensors").
  virtual std::string extension() const = 0;
  // How the container stores `dtype`; nullopt when it cannot.
  virtual std::optional<TypeLayout> type_layout(const std::string& dtype) const = 0;
  // Starts a file at `path`: writes the header for `tensors`, whose bytes then follow through write().
  // Errors name the tensor (unknown dtype, a row that is not whole blocks, a duplicate name) or the file.
  virtual std::unique_ptr<TensorFile> create(const std::string& path, const std::vector<TensorSpec>& tensors,
                                             const FileInfo& info = {}) const = 0;
  // Optional: the index of a folder sharded into several files (weight_map: tensor → file name).
  virtual void write_index(const std::string& path,
                           const std::vector<std::pair<std::string, std::string>>& weight_map) const {
    (void)weight_map;
    fail("writing ", extension(), " files: cannot write a shard index ('", path, "')");
  }

  // Optional synthesis hooks, for block types whose bytes follow rules of their own (quantized
  // blocks). random_blocks fills `n_blocks` blocks of `dtype` from `rng`, scaled so that their values
  // have the given rms (false: not a type this writer synthesizes). companion_scale: types that keep a
  // per-tensor scale beside the blocks (NVFP4's `.scale`) return the scale for that rms; others nullopt.
  virtual bool random_blocks(const std::string& dtype, double rms, Rng& rng, uint8_t* out, int64_t n_blocks) const {
    (void)dtype, (void)rms, (void)rng, (void)out, (void)n_blocks;
    return false;
  }
  virtual std::optional<float> companion_scale(const std::string& dtype, double rms) const {
    (void)dtype, (void)rms;
    return std::nullopt;
  }

  // The bytes of one tensor; errors name the tensor (a dtype this container lacks, a row that is not
  // whole blocks).
  uint64_t tensor_bytes(const TensorSpec& t) const {
    const std::optional<TypeLayout> l = type_layout(t.dtype);
    check(l.has_value(), "writing ", extension(), " files: tensor '", t.name, "' has dtype '", t.dtype,
          "', which this container cannot store");
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    const int64_t row = t.shape.empty() ? 1 : shape_row(t);
    check(row % l->block_elems == 0, "writing ", extension(), " files: tensor '", t.name, "': rows of ", row,
          " elements are not whole ", t.dtype, " blocks of ", l->block_elems);
    return uint64_t(numel / l->block_elems) * l->block_bytes;
  }

 protected:
  // The contiguous dimension's length: the last (PyTorch order) unless the container says otherwise.
  virtual int64_t shape_row(const TensorSpec& t) const { return t.shape.back(); }
};

}  // namespace tandem
