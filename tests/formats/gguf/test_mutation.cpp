// Mutated and truncated copies of a valid GGUF model: each must load or throw tandem::Error, never
// crash or read outside the file. Built twice: in test_gguf, and in test_gguf_asan with the reader
// compiled under ASan/UBSan, where every copy sits in an exact-size heap buffer.
#include <gtest/gtest.h>

#include <random>

#include "formats/gguf/gguf_checkpoint.h"
#include "formats/gguf/gguf_format.h"
#include "gguf_test_util.h"
#include "tandem/model_config.h"

namespace tandem::gguf {
namespace {

using test::DeviceOnlyBackend;
using test::TinyModel;

// One random change; `header_end` is where the original's data section starts.
std::vector<uint8_t> mutate(std::vector<uint8_t> s, size_t header_end, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n ? size_t(rng() % n) : 0; };
  auto put = [&](size_t at, uint64_t v, int bytes) {
    for (int i = 0; i < bytes && at + size_t(i) < s.size(); ++i) s[at + size_t(i)] = uint8_t(v >> (8 * i));
  };
  static const uint64_t kWild[] = {0, 1, 2, 3, 31, 32, 64, 0xffffffffull, 0x100000000ull, uint64_t(1) << 62,
                                   uint64_t(1) << 63, ~uint64_t(0), ~uint64_t(0) - 1};
  switch (rng() % 7) {
    case 0:  // random bytes anywhere
      for (int i = 0, k = 1 + int(rng() % 4); i < k; ++i) s[pick(s.size())] = uint8_t(rng());
      break;
    case 1:  // truncation
      s.resize(pick(s.size()));
      break;
    case 2:  // random bytes in the header
      for (int i = 0, k = 1 + int(rng() % 3); i < k; ++i) s[pick(header_end)] = uint8_t(rng());
      break;
    case 3:  // a length, count, ne or offset replaced by an extreme value
      put(pick(header_end), kWild[pick(std::size(kWild))], 8);
      break;
    case 4:  // a type id, dimension count or small field replaced by a nearby small value
      put(pick(header_end), uint64_t(int64_t(rng() % 48) - 2), 4);
      break;
    case 5:  // truncation inside the header
      s.resize(pick(header_end));
      break;
    default:  // bytes appended
      s.insert(s.end(), 1 + pick(64), uint8_t(rng()));
      break;
  }
  return s;
}

// Everything a load does with a file: config, side files, dump, and every tensor group loaded,
// dequantized and (for matrices) multiplied.
void use_all(const std::vector<uint8_t>& bytes) {
  GgufCheckpoint c(GgufFile::from_bytes(bytes, "mutant.gguf"));
  parse_model_config(c.config_json(), "mutant.gguf (config)");
  c.side_file("tokenizer.json");
  c.side_file("tokenizer_config.json");
  c.dump();
  GgufFormat fmt;
  DeviceOnlyBackend cpu("cpu");
  for (const RawTensor& t : c.tensors()) {
    const std::string suffix = ".weight";
    const bool weight = t.name.size() > suffix.size() && t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0;
    TensorGroup g;
    g.prefix = weight ? t.name.substr(0, t.name.size() - suffix.size()) : t.name;
    g.members.push_back(&t);
    if (weight)
      for (const char* side : {".scale", ".input_scale"})
        if (const RawTensor* s = c.find(g.prefix + side)) g.members.push_back(s);
    if (fmt.probe_group(g) == 0) continue;
    auto q = fmt.load(g, cpu);
    int64_t numel = 1;
    for (int64_t d : q->shape()) numel *= d;
    std::vector<float> out(static_cast<size_t>(numel));
    q->dequantize(out.data());
    if (q->shape().size() == 2 && numel > 0) {
      std::vector<float> x(size_t(2 * q->cols()), 0.5f), y(size_t(2 * q->rows()));
      q->matmul(Tensor::f32(x.data(), 2, q->cols()), Tensor::f32(y.data(), 2, q->rows()));
    }
  }
}

TEST(GgufMutation, EveryCopyLoadsOrFailsCleanly) {
  TinyModel m;
  m.latent = true;
  m.build();
  m.tensors.push_back(make_f32("blk.1.ffn_up_exps.scale", {TinyModel::E}, {1, 2, 3, 4}));
  m.tensors.push_back(make_f32("blk.0.ssm_in.scale", {1}, {0.5f}));
  const std::vector<uint8_t> good = m.bytes();
  const size_t header_end = GgufFile::from_bytes(good, "good.gguf")->data_offset();
  ASSERT_NO_THROW(use_all(good));

  std::mt19937_64 rng(20240607);
  int loaded = 0, rejected = 0;
  for (int i = 0; i < 400; ++i) {
    std::vector<uint8_t> bad = mutate(good, header_end, rng);
    try {
      use_all(bad);
      ++loaded;
    } catch (const tandem::Error& e) {
      ++rejected;
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "mutant " << i << ": expected tandem::Error, got " << typeid(e).name() << ": " << e.what();
    }
  }
  std::printf("%d mutants loaded, %d rejected\n", loaded, rejected);
  // Both outcomes occur, so the loop exercised the checks and the full load path.
  EXPECT_GT(loaded, 20);
  EXPECT_GT(rejected, 100);
}

}  // namespace
}  // namespace tandem::gguf
