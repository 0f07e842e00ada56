// The safetensors files of an MLX folder, read and written here rather than through formats/safetensors
// (plugins include no other plugin's headers): a read-only mapping with its validated tensor table, and
// a streaming writer of one file. MLX saves plain safetensors with `{"format": "mlx"}` metadata.
// Owner: a MappedFile owns its pages; the RawTensors it lists point into them. Thread: one caller per
// object. Sync: a written file is complete when SafetensorsOut::close() returns.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/json_depth.h"
#include "tandem/error.h"
#include "tandem/weights.h"

namespace tandem::mlx {

// Every JSON read here is refused past this nesting depth (tandem/json_depth.h).
constexpr size_t kMaxJsonDepth = 64;

// Bytes per element of a safetensors dtype ("U32", "BF16", …); 0 when unknown.
size_t element_bytes(const std::string& dtype);

// A whole safetensors file mapped read-only, with its tensors (data pointing into the mapping).
// Errors name the file: unreadable, a header that is not JSON, an unknown dtype, a tensor whose
// bytes do not match its shape or lie outside the file.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<RawTensor>& tensors() const { return tensors_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::vector<RawTensor> tensors_;
};

// The tensor names in a safetensors file's header, read without mapping the data (for probing).
// Empty when the file is not a readable safetensors file.
std::vector<std::string> header_names(const std::string& path);

// One tensor of a file being written.
struct OutTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
};

// Writes `path`: the header for `tensors` now, then their bytes through write() in order.
class SafetensorsOut {
 public:
  SafetensorsOut(const std::string& path, const std::vector<OutTensor>& tensors);
  ~SafetensorsOut();
  void write(const void* data, size_t n);
  // Errors: fewer or more bytes than the tensors hold; a failed write or flush.
  void close();

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  uint64_t expected_ = 0, written_ = 0;
};

}  // namespace tandem::mlx
