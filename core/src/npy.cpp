// Minimal .npy (v1.0/v2.0) reader and v1.0 writer for float32 arrays.
#include "tandem/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "tandem/error.h"

namespace tandem {

void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  std::string dims;
  int64_t n = 1;
  for (int64_t d : shape) {
    dims += std::to_string(d) + ", ";
    n *= d;
  }
  if (shape.size() > 1) dims.erase(dims.size() - 2);
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  check(f.good(), "cannot write '", path, "'");
  const char magic[] = "\x93NUMPY\x01\x00";
  f.write(magic, 8);
  uint16_t len = uint16_t(header.size());
  f.write(reinterpret_cast<const char*>(&len), 2);
  f.write(header.data(), std::streamsize(header.size()));
  f.write(reinterpret_cast<const char*>(data), std::streamsize(n * 4));
  check(f.good(), "writing '", path, "' failed");
}

NpyArray read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  check(f.good(), "cannot read '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  check(s.size() >= 10 && std::memcmp(s.data(), "\x93NUMPY", 6) == 0, path, ": not a .npy file");
  int major = uint8_t(s[6]);
  size_t hl, off;
  if (major == 1) {
    hl = uint8_t(s[8]) | size_t(uint8_t(s[9])) << 8;
    off = 10;
  } else {
    check(s.size() >= 12, path, ": truncated header");
    hl = uint8_t(s[8]) | size_t(uint8_t(s[9])) << 8 | size_t(uint8_t(s[10])) << 16 | size_t(uint8_t(s[11])) << 24;
    off = 12;
  }
  check(s.size() >= off + hl, path, ": truncated header");
  std::string header = s.substr(off, hl);
  check(header.find("'descr': '<f4'") != std::string::npos, path, ": expected dtype '<f4'");
  check(header.find("'fortran_order': False") != std::string::npos, path, ": expected C order");
  size_t a = header.find('('), b = header.find(')');
  check(a != std::string::npos && b != std::string::npos, path, ": no shape in header");
  NpyArray arr;
  std::stringstream dims(header.substr(a + 1, b - a - 1));
  std::string tok;
  int64_t n = 1;
  while (std::getline(dims, tok, ',')) {
    if (tok.find_first_not_of(' ') == std::string::npos) continue;
    arr.shape.push_back(std::stoll(tok));
    n *= arr.shape.back();
  }
  check(s.size() == off + hl + size_t(n) * 4, path, ": data holds ", s.size() - off - hl, " bytes, shape needs ", n * 4);
  arr.data.resize(size_t(n));
  std::memcpy(arr.data.data(), s.data() + off + hl, size_t(n) * 4);
  return arr;
}

}  // namespace tandem
