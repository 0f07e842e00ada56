// Writing safetensors files: for tests, tools and the synthetic-model generator.
// Owner: the caller owns the WriteTensors; the writer copies nothing it keeps. Thread: any.
// Sync: none; files are complete when the call returns.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tandem::safetensors {

struct WriteTensor {
  std::string name;
  std::string dtype;            // a safetensors dtype string: "BF16", "F32", "U8", …
  std::vector<int64_t> shape;   // PyTorch order
  std::vector<uint8_t> data;    // numel · sizeof(dtype) bytes, little-endian
};

// Writes a spec-conformant file: tensors in the given order, header padded with spaces to a multiple
// of 8, {"__metadata__": {"format": "pt"}}. Errors name the tensor (unknown dtype, size mismatch,
// duplicate name) or the file (cannot write).
void write_file(const std::string& path, const std::vector<WriteTensor>& tensors);

// For writers that stream tensor data: the file's first bytes (length, header JSON, padding) for
// tensors whose bytes follow in this order, and each tensor's size. The same checks as write_file
// (which writes this header, then the data).
struct TensorLayout {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
};
std::string serialize_header(const std::vector<TensorLayout>& tensors, std::vector<uint64_t>* nbytes = nullptr);

// model.safetensors.index.json for a sharded folder: weight_map tensor → file, in the given order.
void write_index(const std::string& path, const std::vector<std::pair<std::string, std::string>>& weight_map);

// Tensors from float values (row-major, numel values); bf16 and f16 round to nearest even.
WriteTensor make_f32(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& values);
WriteTensor make_bf16(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& values);
WriteTensor make_f16(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& values);

}  // namespace tandem::safetensors
