// One safetensors file: a read-only mapping and the validated table of its tensors.
// Owner: a Mapping owns its pages; RawTensors parsed from it point into them and must not outlive it.
// Thread: parse on one thread; a finished Mapping may be read from any thread. Sync: none.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/weights.h"

namespace tandem::safetensors {

// Bytes per element of a safetensors dtype string; 0 when the dtype is unknown.
size_t dtype_bytes(std::string_view dtype);
// "BOOL, U8, …" for messages.
const char* known_dtypes();

// Readers reject headers longer than this (the reference reader's limit).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// A whole file mapped read-only (POSIX mmap). An empty file maps to no pages.
class Mapping {
 public:
  explicit Mapping(const std::string& path);
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Parses and validates the header of a file held in memory (spec/formats.md §1): known dtypes,
// shapes, offsets whose ranges tile the data buffer. Returns the tensors ordered by offset, their
// data pointing into `bytes`. `file` names the file in errors and in RawTensor::file.
std::vector<RawTensor> parse_file(const uint8_t* bytes, size_t size, const std::string& file);

}  // namespace tandem::safetensors
