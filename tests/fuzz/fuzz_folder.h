// A temporary model folder for the targets whose reader opens a folder (NVFP4, MLX): the fuzz input
// becomes its files, rewritten for every input. One folder per process, removed at exit.
// Owner: the process. Thread: the fuzzer's. Sync: none.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tandem::fuzz {

class FuzzFolder {
 public:
  FuzzFolder() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tandem-fuzz-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) std::abort();
    dir_ = tmpl;
  }
  ~FuzzFolder() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // Empties the folder, then writes each (name, bytes).
  const std::string& write(const std::vector<std::pair<std::string, std::string>>& files) {
    for (const auto& e : std::filesystem::directory_iterator(dir_)) std::filesystem::remove_all(e.path());
    for (const auto& [name, bytes] : files) std::ofstream(dir_ + "/" + name, std::ios::binary) << bytes;
    return dir_;
  }

 private:
  std::string dir_;
};

// The input as three parts: a selector byte, a text up to the first NUL after it, and the bytes after
// that NUL (a safetensors file, which holds NULs of its own).
struct ConfigAndFile {
  uint8_t selector = 0;
  std::string config, file;
};

inline ConfigAndFile config_and_file(const uint8_t* data, size_t size) {
  ConfigAndFile p;
  if (size == 0) return p;
  p.selector = data[0];
  const std::string s(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nul = s.find('\0');
  p.config = s.substr(0, nul);
  if (nul != std::string::npos) p.file = s.substr(nul + 1);
  return p;
}

}  // namespace tandem::fuzz
