// One GGUF file (spec/formats.md § 2): a read-only mapping (or an owned buffer), its metadata and the
// validated table of its tensors.
// Owner: a GgufFile owns its bytes; TensorInfo::data points into them and must not outlive it.
// Thread: parse on one thread; a parsed file may be read from any thread. Sync: none.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "gguf_metadata.h"

namespace tandem::gguf {

constexpr uint32_t kDefaultAlignment = 32;
constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};

struct TensorInfo {
  std::string name;
  const GgmlTypeInfo* type = nullptr;  // never null once parsed
  std::vector<int64_t> ne;             // ggml order: ne[0] is contiguous
  uint64_t offset = 0;                 // from the start of the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;
  int64_t numel() const;
};

class GgufFile {
 public:
  // Maps `path` read-only and parses it. Every error is one line naming the file and the field.
  static std::unique_ptr<GgufFile> open(const std::string& path);
  // Parses bytes held in memory (tests; sanitizers see reads past the end of an exact-size buffer).
  static std::unique_ptr<GgufFile> from_bytes(std::vector<uint8_t> bytes, const std::string& name);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // from the start of the file
  size_t size() const { return size_; }
  const Metadata& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(const std::string& name) const;

  // True when p points into the bytes of a GgufFile that is still open. The format uses it to claim
  // dense tensors that came from GGUF files while leaving other containers' to their own formats.
  static bool owns(const void* p);

 private:
  GgufFile() = default;
  void parse();

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::vector<uint8_t> owned_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  Metadata metadata_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

// Names from files are printed in one-line messages: control characters become '?', and very long
// names are cut.
std::string printable(const std::string& s);

}  // namespace tandem::gguf
