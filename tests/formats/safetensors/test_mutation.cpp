// Mutated and truncated copies of a valid file: each must load or throw tandem::Error, never crash
// or read outside the file (run under sanitizers to catch stray reads).
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "formats/safetensors/dense_cpu.h"
#include "formats/safetensors/safetensors_checkpoint.h"
#include "formats/safetensors/safetensors_file.h"
#include "formats/safetensors/safetensors_writer.h"
#include "st_test_util.h"

namespace tandem::safetensors {
namespace {

using test::TempDir;

std::string valid_file(const TempDir& dir) {
  write_file(dir.file("base.safetensors"),
             {make_f32("a.weight", {2, 3}, {1, 2, 3, 4, 5, 6}), make_bf16("b", {4}, {1, -1, 2, -2}),
              make_f16("c", {2, 1, 2}, {0.5f, 1, 2, 4}), WriteTensor{"packed", "U8", {5}, {1, 2, 3, 4, 5}}});
  return test::read_bytes(dir.file("base.safetensors"));
}

// One random change to a file whose header (per the unmutated original) is `header_len` bytes.
std::string mutate(std::string s, size_t header_len, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n ? size_t(rng() % n) : 0; };
  static const char kJsonChars[] = "0123456789-+.eE\"[]{},: \\xF";
  const size_t header_end = std::min(s.size(), 8 + header_len);
  int kind = int(rng() % 7);
  if (header_end <= 8 && (kind == 0 || kind == 2 || kind == 4)) kind = 6;
  switch (kind) {
    case 0:  // random bytes anywhere
      for (int i = 0, k = 1 + int(rng() % 4); i < k; ++i) s[pick(s.size())] = char(rng());
      break;
    case 1:  // truncation
      s.resize(pick(s.size()));
      break;
    case 2:  // JSON-meaningful characters inside the header
      for (int i = 0, k = 1 + int(rng() % 3); i < k; ++i)
        s[8 + pick(header_end - 8)] = kJsonChars[pick(sizeof(kJsonChars) - 1)];
      break;
    case 3: {  // a nearby or wild header length
      uint64_t n = rng() % 2 ? uint64_t(header_len) + (rng() % 33) - 16 : rng() >> (rng() % 64);
      if (s.size() < 8) s.resize(8);
      s.replace(0, 8, test::u64_le(n));
      break;
    }
    case 4: {  // a number replaced by a huge, negative or fractional one, header length kept consistent
      size_t at = 8 + pick(header_end - 8);
      while (at < header_end && !(s[at] >= '0' && s[at] <= '9')) ++at;
      if (at >= header_end) break;
      static const char* kNumbers[] = {"18446744073709551615", "18446744073709551616", "-1", "4294967296", "1e3",
                                       "9223372036854775808", "0"};
      std::string num = kNumbers[pick(7)];
      s.replace(at, 1, num);
      s.replace(0, 8, test::u64_le(header_len + num.size() - 1));
      break;
    }
    case 5:  // tensor bytes changed: still a valid file
      if (s.size() > header_end) s[header_end + pick(s.size() - header_end)] = char(rng());
      break;
    default:  // bytes appended
      s.append(1 + pick(16), char(rng()));
      break;
  }
  return s;
}

// Touches every byte of every tensor and dequantizes the dense ones.
void use_all(const std::vector<RawTensor>& tensors) {
  for (const RawTensor& t : tensors) {
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < t.nbytes; ++i) sink = sink ^ t.data[i];
    if (is_dense_dtype(t.dtype)) {
      DenseTensor d(t);
      std::vector<float> out(t.nbytes / (t.dtype == "F32" ? 4 : 2));
      d.dequantize(out.data());
    }
  }
}

TEST(SafetensorsMutation, MutatedFilesLoadOrThrow) {
  TempDir dir;
  const std::string base = valid_file(dir);
  size_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint8_t(base[i]);
  std::mt19937_64 rng(20240611);
  int loaded = 0, rejected = 0;
  for (int iter = 0; iter < 400; ++iter) {
    std::string bytes = mutate(base, header_len, rng);
    if (rng() % 4 == 0) bytes = mutate(bytes, header_len, rng);
    SCOPED_TRACE("iteration " + std::to_string(iter));

    // In memory, in a heap block of the exact size, so a sanitizer sees any read past the end.
    std::unique_ptr<uint8_t[]> exact(new uint8_t[std::max<size_t>(bytes.size(), 1)]);
    std::memcpy(exact.get(), bytes.data(), bytes.size());
    std::vector<RawTensor> in_memory;
    bool ok_memory = false;
    try {
      in_memory = parse_file(exact.get(), bytes.size(), "mem");
      for (const RawTensor& t : in_memory) {
        ASSERT_GE(t.data, exact.get() + 8) << t.name;
        ASSERT_LE(t.data + t.nbytes, exact.get() + bytes.size()) << t.name;
      }
      use_all(in_memory);
      ok_memory = true;
    } catch (const tandem::Error&) {
    }

    // Through the file system, as the engine opens it: the same verdict and the same table.
    // A new name each time: rewriting a file in place makes ext4 flush it to disk on close.
    std::string path = dir.file("m" + std::to_string(iter) + ".safetensors");
    test::write_bytes(path, bytes);
    try {
      auto ckpt = open_checkpoint(path);
      ASSERT_TRUE(ok_memory);
      const auto& ts = ckpt->tensors();
      ASSERT_EQ(ts.size(), in_memory.size());
      for (size_t i = 0; i < ts.size(); ++i) {
        EXPECT_EQ(ts[i].name, in_memory[i].name);
        EXPECT_EQ(ts[i].nbytes, in_memory[i].nbytes);
        EXPECT_EQ(ts[i].data - ts[0].data, in_memory[i].data - in_memory[0].data);
      }
      use_all(ts);
      ++loaded;
    } catch (const tandem::Error& e) {
      EXPECT_FALSE(ok_memory) << e.what();
      ++rejected;
    }
  }
  // The mutations exercise both outcomes; a generator that always broke (or never broke) the file
  // would test little.
  EXPECT_GT(loaded, 20);
  EXPECT_GT(rejected, 100);
}

}  // namespace
}  // namespace tandem::safetensors
