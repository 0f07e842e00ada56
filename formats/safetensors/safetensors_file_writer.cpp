// SafetensorsWriter: the header first, then the tensors' bytes as they come; close() checks the count,
// flushes and syncs, so that a full disk is an error naming the file rather than a short file.
#include "safetensors_file_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "safetensors_file.h"
#include "safetensors_writer.h"
#include "tandem/error.h"

namespace tandem::safetensors {
namespace {

class File final : public TensorFile {
 public:
  File(const std::string& path, const std::string& header, uint64_t data_bytes)
      : path_(path), f_(std::fopen(path.c_str(), "wb")), left_(data_bytes) {
    check(f_ != nullptr, "cannot create '", path, "': ", std::strerror(errno));
    std::setvbuf(f_, nullptr, _IOFBF, size_t(1) << 20);
    put(header.data(), header.size());
  }
  ~File() override {
    if (f_) std::fclose(f_);
  }
  void write(const void* data, size_t n) override {
    check(n <= left_, "writing '", path_, "': ", n, " bytes more than the header's tensors hold");
    put(data, n);
    left_ -= n;
  }
  void close() override {
    check(left_ == 0, "writing '", path_, "': ", left_, " bytes of tensor data missing");
    const int a = std::fflush(f_), b = ::fsync(fileno(f_)), c = std::fclose(f_);
    f_ = nullptr;
    if (a || b || c) fail("writing '", path_, "' failed: ", std::strerror(errno));
  }

 private:
  void put(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n) fail("writing '", path_, "' failed: ", std::strerror(errno));
  }
  std::string path_;
  std::FILE* f_;
  uint64_t left_;
};

}  // namespace

std::optional<TypeLayout> SafetensorsWriter::type_layout(const std::string& dtype) const {
  const size_t b = dtype_bytes(dtype);
  if (b == 0) return std::nullopt;
  return TypeLayout{1, b};
}

std::unique_ptr<TensorFile> SafetensorsWriter::create(const std::string& path, const std::vector<TensorSpec>& tensors,
                                                      const FileInfo& info) const {
  (void)info;  // safetensors carries no metadata beyond {"format": "pt"}
  std::vector<TensorLayout> layout;
  layout.reserve(tensors.size());
  for (const TensorSpec& t : tensors) layout.push_back({t.name, t.dtype, t.shape});
  std::vector<uint64_t> nbytes;
  const std::string header = serialize_header(layout, &nbytes);
  uint64_t total = 0;
  for (uint64_t n : nbytes) total += n;
  return std::make_unique<File>(path, header, total);
}

void SafetensorsWriter::write_index(const std::string& path,
                                    const std::vector<std::pair<std::string, std::string>>& weight_map) const {
  safetensors::write_index(path, weight_map);
}

}  // namespace tandem::safetensors
