// Writing GGUF v3 files as llama.cpp's gguf_write does: header, metadata, tensor infos, padding to
// the alignment, then each tensor's bytes padded to the alignment. For tests, tools and the
// synthetic-model generator.
// Owner: the caller owns its inputs; nothing is kept. Thread: any. Sync: none; the file is complete
// when write_gguf returns.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gguf_metadata.h"

namespace tandem::gguf {

struct WriteTensor {
  std::string name;            // at most 63 bytes (llama.cpp's GGML_MAX_NAME)
  int type = 0;                // ggml type id
  std::vector<int64_t> ne;     // ggml order (ne[0] contiguous), 1–4 dimensions
  std::vector<uint8_t> data;   // exactly the tensor's bytes (ne product / block elems · block bytes)
};

// The file's bytes. The alignment is the metadata's `general.alignment` (UINT32) when present, else
// 32. Errors name the key or tensor: a value that does not fit its type, an unknown ggml type,
// ne[0] not a multiple of the block, a data size that does not match the shape, duplicate names.
std::vector<uint8_t> serialize_gguf(const Metadata& metadata, const std::vector<WriteTensor>& tensors);

// For writers that stream tensor data (the synthetic-model generator's 22 GB files): a tensor's name,
// type and shape without its bytes.
struct TensorLayout {
  std::string name;
  int type = 0;
  std::vector<int64_t> ne;
};
struct GgufHeader {
  std::vector<uint8_t> bytes;   // everything before the data section, padded to the alignment
  uint64_t alignment = 32;      // each tensor's bytes follow, padded to this, in the given order
  std::vector<uint64_t> nbytes; // each tensor's size before padding
};
// The same checks and layout as serialize_gguf, which is this header followed by the data.
GgufHeader serialize_gguf_header(const Metadata& metadata, const std::vector<TensorLayout>& tensors);
void write_gguf(const std::string& path, const Metadata& metadata, const std::vector<WriteTensor>& tensors);

// Tensors from float values in ggml element order (ne[0] fastest). F16/BF16 round to nearest even.
WriteTensor make_f32(const std::string& name, const std::vector<int64_t>& ne, const std::vector<float>& values);
WriteTensor make_f16(const std::string& name, const std::vector<int64_t>& ne, const std::vector<float>& values);
WriteTensor make_bf16(const std::string& name, const std::vector<int64_t>& ne, const std::vector<float>& values);

}  // namespace tandem::gguf
