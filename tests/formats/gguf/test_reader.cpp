// Tests formats/gguf/gguf_file.*, gguf_metadata.* and gguf_writer.*: the writer's bytes against a file
// built field by field from spec/formats.md § 2, round trips of every metadata type, alignment, typed
// access, and one-line errors for each kind of broken file.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "formats/gguf/gguf_file.h"
#include "formats/gguf/gguf_writer.h"
#include "gguf_test_util.h"

namespace tandem::gguf {
namespace {

using test::ByteBuilder;
using test::expect_error;

std::unique_ptr<GgufFile> parse(const std::vector<uint8_t>& bytes, const std::string& name = "mem.gguf") {
  return GgufFile::from_bytes(bytes, name);
}

uint64_t bits(int64_t v) { return uint64_t(v); }

// One value of every type, scalars and arrays (including empty ones).
Metadata every_type() {
  Metadata m;
  m.set("u8", Value::integer(ValueType::U8, 200));
  m.set("i8", Value::integer(ValueType::I8, bits(-100)));
  m.set("u16", Value::integer(ValueType::U16, 60000));
  m.set("i16", Value::integer(ValueType::I16, bits(-30000)));
  m.set("u32", Value::u32(4000000000u));
  m.set("i32", Value::i32(-2000000000));
  m.set("f32", Value::f32(1.5f));
  m.set("bool", Value::boolean(true));
  m.set("string", Value::str(std::string("h\xc3\xa9llo\nworld\0!", 14)));
  m.set("u64", Value::integer(ValueType::U64, std::numeric_limits<uint64_t>::max()));
  m.set("i64", Value::integer(ValueType::I64, bits(std::numeric_limits<int64_t>::min())));
  m.set("f64", Value::real(ValueType::F64, M_PI));
  m.set("a.u8", Value::integers(ValueType::U8, {0, 255}));
  m.set("a.i8", Value::integers(ValueType::I8, {bits(-128), 127}));
  m.set("a.u16", Value::integers(ValueType::U16, {1, 65535}));
  m.set("a.i16", Value::integers(ValueType::I16, {bits(-32768), 5}));
  m.set("a.u32", Value::u32s({0, 7, 4294967295u}));
  m.set("a.i32", Value::i32s({-1, 0, 2147483647}));
  m.set("a.f32", Value::f32s({-0.25f, 3e38f}));
  m.set("a.bool", Value::integers(ValueType::BOOL, {1, 0, 1}));
  m.set("a.string", Value::strs({"a", "", "long string"}));
  m.set("a.u64", Value::integers(ValueType::U64, {std::numeric_limits<uint64_t>::max(), 0}));
  m.set("a.i64", Value::integers(ValueType::I64, {bits(-5), bits(std::numeric_limits<int64_t>::max())}));
  m.set("a.f64", Value::reals(ValueType::F64, {1e-300, -2.5}));
  m.set("a.empty", Value::integers(ValueType::I32, {}));
  m.set("a.empty_strings", Value::strs({}));
  return m;
}

void expect_same(const Value& a, const Value& b, const std::string& key) {
  EXPECT_EQ(a.type, b.type) << key;
  EXPECT_EQ(a.elem, b.elem) << key;
  EXPECT_EQ(a.ints, b.ints) << key;
  EXPECT_EQ(a.strings, b.strings) << key;
  ASSERT_EQ(a.floats.size(), b.floats.size()) << key;
  for (size_t i = 0; i < a.floats.size(); ++i) {
    double want = a.elem == ValueType::F32 ? double(float(a.floats[i])) : a.floats[i];
    EXPECT_EQ(b.floats[i], want) << key;
  }
}

TEST(GgufWriter, BytesMatchTheFormatDescription) {
  Metadata m;
  m.set("general.architecture", Value::str("x"));
  m.set("n", Value::u32(7));
  m.set("list", Value::i32s({-1, 2}));
  std::vector<WriteTensor> t = {make_f32("a", {3}, {1, 2, 3}), make_f16("b", {2, 1}, {1.0f, -2.0f})};

  ByteBuilder b;
  b.header(3, 2, 3);
  b.str("general.architecture").u32(8).str("x");
  b.str("n").u32(4).u32(7);
  b.str("list").u32(9).u32(5).u64(2).u32(0xffffffffu).u32(2);
  b.info("a", {3}, 0, 0);
  b.info("b", {2, 1}, 1, 32);  // 12 bytes of "a" padded to 32
  b.pad(32);
  b.f32(1).f32(2).f32(3).pad(32);
  b.u16(0x3c00).u16(0xc000).pad(32);
  EXPECT_EQ(serialize_gguf(m, t), b.bytes());
}

class GgufRoundTrip : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufRoundTrip, EveryValueTypeAndAlignedTensors) {
  const uint32_t alignment = GetParam();
  Metadata m = every_type();
  if (alignment != kDefaultAlignment) m.set("general.alignment", Value::u32(alignment));
  std::vector<uint8_t> q8(34 * 2);
  for (size_t i = 0; i < q8.size(); ++i) q8[i] = uint8_t(i * 7 + 3);
  std::vector<WriteTensor> tensors = {make_f32("odd", {3}, {1.5f, -2.5f, 3.25f}),
                                      make_f16("half", {5, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}),
                                      WriteTensor{"q8", 8, {32, 2}, q8},
                                      make_bf16("bf", {2, 1, 2}, {1, -1, 0.5f, 2}),
                                      make_f32("empty", {0, 4}, {})};
  test::TempDir dir;
  write_gguf(dir.file("m.gguf"), m, tensors);
  auto f = GgufFile::open(dir.file("m.gguf"));

  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), alignment);
  EXPECT_EQ(f->data_offset() % alignment, 0u);
  ASSERT_EQ(f->metadata().entries().size(), m.entries().size());
  for (size_t i = 0; i < m.entries().size(); ++i) {
    EXPECT_EQ(f->metadata().entries()[i].first, m.entries()[i].first);
    expect_same(m.entries()[i].second, f->metadata().entries()[i].second, m.entries()[i].first);
  }
  ASSERT_EQ(f->tensors().size(), tensors.size());
  uint64_t expected_offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = f->tensors()[i];
    EXPECT_EQ(t.name, tensors[i].name);
    EXPECT_EQ(t.type->id, tensors[i].type);
    EXPECT_EQ(t.ne, tensors[i].ne);
    EXPECT_EQ(t.offset, expected_offset) << t.name;  // packed in order, each padded (llama.cpp's rule)
    EXPECT_EQ((reinterpret_cast<uintptr_t>(t.data) - reinterpret_cast<uintptr_t>(f->tensors()[0].data)) % alignment, 0u);
    ASSERT_EQ(t.nbytes, tensors[i].data.size());
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.nbytes), tensors[i].data) << t.name;
    expected_offset += (t.nbytes + alignment - 1) / alignment * alignment;
    EXPECT_EQ(f->find(t.name), &t);
  }
  EXPECT_EQ(f->find("absent"), nullptr);
  EXPECT_EQ(f->size(), f->data_offset() + expected_offset);
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufRoundTrip, ::testing::Values(32u, 64u, 8u));

TEST(GgufReader, AcceptsVersion2AndNoTensors) {
  ByteBuilder b;
  b.header(2, 0, 1).str("k").u32(4).u32(9);
  auto f = parse(b.bytes());
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->metadata().get<uint32_t>("k"), 9u);
  EXPECT_TRUE(f->tensors().empty());
}

TEST(GgufMetadata, TypedAccess) {
  Metadata m("gguf: file 't.gguf'");
  m.set("u32", Value::u32(5));
  m.set("i32", Value::i32(-3));
  m.set("big", Value::integer(ValueType::U64, uint64_t(1) << 40));
  m.set("u8", Value::integer(ValueType::U8, 200));
  m.set("f", Value::f32(0.5f));
  m.set("f64", Value::real(ValueType::F64, 0.25));
  m.set("b", Value::boolean(true));
  m.set("s", Value::str("hi"));
  m.set("arr", Value::i32s({1, 0, 4}));
  m.set("farr", Value::f32s({1.5f}));
  m.set("sarr", Value::strs({"x", "y"}));

  EXPECT_EQ(m.get<uint32_t>("u32"), 5u);
  EXPECT_EQ(m.get<int32_t>("u32"), 5);
  EXPECT_EQ(m.get<uint32_t>("u8"), 200u);
  EXPECT_EQ(m.get<int32_t>("i32"), -3);
  EXPECT_EQ(m.get<float>("f"), 0.5f);
  EXPECT_EQ(m.get<float>("f64"), 0.25f);
  EXPECT_EQ(m.get<bool>("b"), true);
  EXPECT_EQ(m.get<std::string>("s"), "hi");
  EXPECT_EQ(m.get<uint32_t>("absent"), std::nullopt);
  EXPECT_EQ(m.get_array<uint32_t>("arr"), (std::vector<uint32_t>{1, 0, 4}));
  EXPECT_EQ(m.get_array<float>("farr"), (std::vector<float>{1.5f}));
  EXPECT_EQ(m.get_array<std::string>("sarr"), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(m.get_per_layer<uint32_t>("u32", 3), (std::vector<uint32_t>{5, 5, 5}));
  EXPECT_EQ(m.get_per_layer<uint32_t>("arr", 3), (std::vector<uint32_t>{1, 0, 4}));
  EXPECT_EQ(m.get_per_layer<uint32_t>("absent", 3), std::nullopt);

  expect_error([&] { m.get<uint32_t>("i32"); }, {"t.gguf", "'i32'", "unsigned 32-bit", "-3"});
  expect_error([&] { m.get<uint32_t>("big"); }, {"'big'", "1099511627776"});
  expect_error([&] { m.get<float>("u32"); }, {"'u32'", "expected a float", "UINT32"});
  expect_error([&] { m.get<bool>("u32"); }, {"'u32'", "bool"});
  expect_error([&] { m.get<std::string>("arr"); }, {"'arr'", "[INT32 × 3]"});
  expect_error([&] { m.get<uint32_t>("arr"); }, {"'arr'", "array"});
  expect_error([&] { m.get_array<uint32_t>("u32"); }, {"'u32'", "expected an array"});
  expect_error([&] { m.get_per_layer<uint32_t>("arr", 4); }, {"'arr'", "one value per layer (4)", "array of 3"});
  expect_error([&] { m.require<uint32_t>("nope"); }, {"t.gguf", "missing required key 'nope'"});
}

// ---- broken files ----

// A valid file with one F32 tensor {8} at offset 0 and one Q8_0 tensor {32} at offset 32.
struct Layout {
  ByteBuilder b;
  size_t off_offset_a = 0;   // where tensor a's offset field sits
  size_t off_type_b = 0;     // where tensor b's type field sits
  size_t off_ne0_b = 0;
};

Layout good_file(uint64_t offset_a = 0, uint32_t type_b = 8, uint64_t ne0_b = 32, uint64_t offset_b = 32) {
  Layout l;
  l.b.header(3, 2, 1).str("general.architecture").u32(8).str("none");
  l.b.str("a").u32(1).u64(8).u32(0);
  l.off_offset_a = l.b.size();
  l.b.u64(offset_a);
  l.b.str("b").u32(1);
  l.off_ne0_b = l.b.size();
  l.b.u64(ne0_b);
  l.off_type_b = l.b.size();
  l.b.u32(type_b).u64(offset_b).pad(32);
  l.b.raw(std::vector<uint8_t>(32 + 34, 0x11));
  return l;
}

TEST(GgufBadFile, GoodFileParses) {
  auto f = parse(good_file().b.bytes());
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->tensors()[1].nbytes, 34u);
}

TEST(GgufBadFile, Truncated) {
  std::vector<uint8_t> good = good_file().b.bytes();
  for (size_t n : {size_t(0), size_t(3), size_t(6), size_t(20), size_t(40), size_t(90), good.size() - 1}) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + long(n));
    expect_error([&] { parse(cut, "cut.gguf"); }, {"cut.gguf"});
  }
  std::vector<uint8_t> cut(good.begin(), good.begin() + 6);
  expect_error([&] { parse(cut, "cut.gguf"); }, {"cut.gguf", "truncated", "version"});
  cut.assign(good.begin(), good.end() - 1);
  expect_error([&] { parse(cut, "cut.gguf"); }, {"cut.gguf", "tensor 'b'", "outside the data section"});
  test::TempDir dir;
  test::write_bytes(dir.file("t.gguf"), cut);
  expect_error([&] { GgufFile::open(dir.file("t.gguf")); }, {dir.file("t.gguf"), "tensor 'b'"});
  expect_error([&] { GgufFile::open(dir.file("absent.gguf")); }, {"absent.gguf", "cannot open"});
}

TEST(GgufBadFile, BadMagicAndVersion) {
  std::vector<uint8_t> bad = good_file().b.bytes();
  bad[0] = 'X';
  expect_error([&] { parse(bad); }, {"mem.gguf", "bad magic", "58 47 55 46"});
  for (uint32_t v : {1u, 4u, 0x03000000u}) {
    std::vector<uint8_t> b = good_file().b.bytes();
    std::memcpy(&b[4], &v, 4);
    expect_error([&] { parse(b); }, {"mem.gguf", "unsupported version " + std::to_string(v)});
  }
}

TEST(GgufBadFile, TensorTypesAndSizes) {
  expect_error([&] { parse(good_file(0, 99).b.bytes()); }, {"tensor 'b'", "unknown ggml type id 99"});
  expect_error([&] { parse(good_file(0, 4).b.bytes()); }, {"tensor 'b'", "unknown ggml type id 4"});  // retired Q4_2
  expect_error([&] { parse(good_file(0, 8, 16).b.bytes()); },
               {"tensor 'b'", "ne[0] = 16 is not a multiple of the Q8_0 block size 32"});
  // A Q4_0 tensor is known to ggml (sized and listed) even though tandem has no kernel for it.
  auto f = parse(good_file(0, 2, 32, 32).b.bytes());
  EXPECT_STREQ(f->tensors()[1].type->name, "Q4_0");
  EXPECT_EQ(f->tensors()[1].nbytes, 18u);
}

TEST(GgufBadFile, Offsets) {
  expect_error([&] { parse(good_file(0, 8, 32, 64).b.bytes()); }, {"tensor 'b'", "outside the data section of 66 bytes"});
  expect_error([&] { parse(good_file(0, 8, 32, uint64_t(1) << 63).b.bytes()); }, {"tensor 'b'", "outside the data section"});
  expect_error([&] { parse(good_file(0, 8, 32, 16).b.bytes()); }, {"tensor 'b'", "offset 16 is not a multiple of the alignment 32"});
  expect_error([&] { parse(good_file(32, 8, 32, 0).b.bytes()); }, {"tensor 'b'", "overlaps tensor 'a'"});
}

TEST(GgufBadFile, Metadata) {
  ByteBuilder nested;
  nested.header(3, 0, 1).str("k").u32(9).u32(9).u64(1).u32(4).u64(0);
  expect_error([&] { parse(nested.bytes()); }, {"mem.gguf", "key 'k'", "nested arrays"});

  ByteBuilder long_string;
  long_string.header(3, 0, 1).str("k").u32(8).u64(1000).u32(0);
  expect_error([&] { parse(long_string.bytes()); }, {"mem.gguf", "key 'k'", "string of 1000 bytes", "runs past the end"});

  ByteBuilder long_key;
  long_key.header(3, 0, 1).u64(uint64_t(1) << 62).u64(0).u64(0);
  expect_error([&] { parse(long_key.bytes()); }, {"metadata key #0", "runs past the end"});

  ByteBuilder huge_array;
  huge_array.header(3, 0, 1).str("k").u32(9).u32(10).u64(uint64_t(1) << 61).u64(0);
  expect_error([&] { parse(huge_array.bytes()); }, {"key 'k'", "element count", "2305843009213693952"});

  ByteBuilder bad_type;
  bad_type.header(3, 0, 1).str("k").u32(13).u32(0);
  expect_error([&] { parse(bad_type.bytes()); }, {"key 'k'", "unknown value type 13"});

  ByteBuilder dup;
  dup.header(3, 0, 2).str("k").u32(4).u32(1).str("k").u32(4).u32(2);
  expect_error([&] { parse(dup.bytes()); }, {"key 'k'", "appears twice"});

  ByteBuilder counts;
  counts.header(3, uint64_t(1) << 60, 0);
  expect_error([&] { parse(counts.bytes()); }, {"tensor count", "1152921504606846976"});
  ByteBuilder kv_count;
  kv_count.header(3, 0, 1000);
  expect_error([&] { parse(kv_count.bytes()); }, {"metadata key count", "1000"});

  for (auto [type, value, what] : {std::tuple{4u, 48u, "power of two"}, std::tuple{4u, 0u, "power of two"},
                                   std::tuple{5u, 32u, "expected UINT32"}}) {
    ByteBuilder align;
    align.header(3, 0, 1).str("general.alignment").u32(type).u32(value);
    expect_error([&] { parse(align.bytes()); }, {"general.alignment", what});
  }
}

TEST(GgufBadFile, TensorInfos) {
  ByteBuilder dims;
  dims.header(3, 1, 0).info("t", {1, 1, 1, 1, 1}, 0, 0);
  expect_error([&] { parse(dims.bytes()); }, {"tensor 't'", "at most 4 dimensions, found 5"});

  ByteBuilder neg;
  neg.header(3, 1, 0).info("t", {uint64_t(-2)}, 0, 0);
  expect_error([&] { parse(neg.bytes()); }, {"tensor 't'", "ne[0] is -2"});

  ByteBuilder overflow;
  overflow.header(3, 1, 0).info("t", {uint64_t(1) << 40, uint64_t(1) << 40}, 0, 0).pad(32);
  expect_error([&] { parse(overflow.bytes()); }, {"tensor 't'", "too many elements"});

  // An empty dimension does not excuse the others: readers still multiply them (a row's bytes). The
  // second shape is the one CI's fuzzer found (a row of 2^61 + 4 F32 that overflowed row_bytes).
  ByteBuilder empty_wide;
  empty_wide.header(3, 1, 0).info("t", {uint64_t(1) << 40, 0, uint64_t(1) << 40}, 0, 0).pad(32);
  expect_error([&] { parse(empty_wide.bytes()); }, {"tensor 't'", "too many elements"});
  ByteBuilder empty_row;
  empty_row.header(3, 1, 0).info("t", {(uint64_t(1) << 61) + 4, 0}, 0, 0).pad(32);
  expect_error([&] { parse(empty_row.bytes()); }, {"tensor 't'", "F32", "more than 2^63 bytes"});

  ByteBuilder dup;
  dup.header(3, 2, 0).info("t", {1}, 0, 0).info("t", {1}, 0, 32).pad(32).raw(std::vector<uint8_t>(64));
  expect_error([&] { parse(dup.bytes()); }, {"tensor 't'", "appears twice"});

  ByteBuilder control;
  control.header(3, 1, 0).info("a\nb", {1}, 77, 0);
  expect_error([&] { parse(control.bytes()); }, {"tensor 'a?b'", "unknown ggml type id 77"});
}

}  // namespace
}  // namespace tandem::gguf
