// Reading safetensors: writer → reader round trips, sharded folders, and every rejected input.
#include <gtest/gtest.h>

#include <cstring>

#include "formats/safetensors/safetensors_checkpoint.h"
#include "formats/safetensors/safetensors_file.h"
#include "formats/safetensors/safetensors_format.h"
#include "formats/safetensors/safetensors_writer.h"
#include "st_test_util.h"

namespace tandem::safetensors {
namespace {

using test::expect_error;
using test::raw_file;
using test::TempDir;

WriteTensor bytes_tensor(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                         size_t nbytes, uint8_t seed) {
  WriteTensor t{name, dtype, std::move(shape), std::vector<uint8_t>(nbytes)};
  for (size_t i = 0; i < nbytes; ++i) t.data[i] = uint8_t(seed + 31 * i);
  return t;
}

std::vector<WriteTensor> mixed_tensors() {
  return {
      make_f32("model.a", {2, 3}, {1.5f, -2.f, 3.25f, 0.f, 1e-3f, -7.f}),
      make_bf16("model.b", {4}, {1.f, -0.5f, 3.f, 65504.f}),
      make_f16("model.c", {1, 2, 2}, {0.25f, -1.f, 2.f, 1e-6f}),
      bytes_tensor("model.packed", "U8", {5}, 5, 7),
      bytes_tensor("model.i64", "I64", {2}, 16, 3),
      bytes_tensor("model.fp8", "F8_E4M3", {3}, 3, 9),
      bytes_tensor("model.empty", "F32", {0, 4}, 0, 0),
      bytes_tensor("model.scalar", "F64", {}, 8, 1),
  };
}

void expect_same(const RawTensor& got, const WriteTensor& want) {
  EXPECT_EQ(got.name, want.name);
  EXPECT_EQ(got.dtype, want.dtype) << want.name;
  EXPECT_EQ(got.shape, want.shape) << want.name;
  ASSERT_EQ(got.nbytes, want.data.size()) << want.name;
  if (got.nbytes) EXPECT_EQ(std::memcmp(got.data, want.data.data(), got.nbytes), 0) << want.name;
}

TEST(SafetensorsReader, RoundTripMixedDtypes) {
  TempDir dir;
  auto tensors = mixed_tensors();
  write_file(dir.file("model.safetensors"), tensors);

  // The file layout itself, independent of our reader: padded header, offsets in write order.
  std::string bytes = test::read_bytes(dir.file("model.safetensors"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  std::string json = bytes.substr(8, n);
  EXPECT_NE(json.find(R"("model.a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})"), std::string::npos);
  EXPECT_NE(json.find(R"("model.b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]})"), std::string::npos);
  EXPECT_NE(json.find(R"("__metadata__":{"format":"pt"})"), std::string::npos);
  EXPECT_EQ(bytes.size(), 8 + n + 24 + 8 + 8 + 5 + 16 + 3 + 0 + 8);

  auto ckpt = open_checkpoint(dir.file("model.safetensors"));
  EXPECT_EQ(ckpt->path(), dir.file("model.safetensors"));
  ASSERT_EQ(ckpt->tensors().size(), tensors.size());
  for (const auto& want : tensors) {
    const RawTensor* got = ckpt->find(want.name);
    ASSERT_NE(got, nullptr) << want.name;
    expect_same(*got, want);
    EXPECT_EQ(got->file, dir.file("model.safetensors"));
  }
  EXPECT_EQ(ckpt->find("model.missing"), nullptr);
  // Values, decoded independently: F32 exact, BF16 of values representable in bf16, F16 likewise.
  const RawTensor* a = ckpt->find("model.a");
  EXPECT_EQ(test::ref_value("F32", a->data + 4 * 5), -7.0);
  const RawTensor* b = ckpt->find("model.b");
  EXPECT_EQ(test::ref_value("BF16", b->data + 2 * 1), -0.5);
  const RawTensor* c = ckpt->find("model.c");
  EXPECT_EQ(test::ref_value("F16", c->data + 2 * 2), 2.0);
}

TEST(SafetensorsReader, FolderWithoutIndexReadsEveryFileInNameOrder) {
  TempDir dir;
  write_file(dir.file("b.safetensors"), {make_f32("y", {1}, {2.f})});
  write_file(dir.file("a.safetensors"), {make_f32("x", {1}, {1.f})});
  test::write_bytes(dir.file("notes.txt"), "not a tensor file");
  auto ckpt = open_checkpoint(dir.path());
  ASSERT_EQ(ckpt->tensors().size(), 2u);
  EXPECT_EQ(ckpt->tensors()[0].name, "x");
  EXPECT_EQ(ckpt->tensors()[1].name, "y");
  EXPECT_EQ(ckpt->find("y")->file, dir.file("b.safetensors"));
}

TEST(SafetensorsReader, ShardedFolderWithIndex) {
  TempDir dir;
  write_file(dir.file("model-00001-of-00002.safetensors"),
             {make_bf16("l.0.w", {2, 2}, {1, 2, 3, 4}), make_f32("l.0.b", {2}, {5, 6})});
  write_file(dir.file("model-00002-of-00002.safetensors"), {make_bf16("l.1.w", {2, 2}, {7, 8, 9, 10})});
  write_file(dir.file("mtp.safetensors"), {make_f32("mtp.w", {1}, {11})});
  // Not named by the index: ignored, even though it would clash.
  write_file(dir.file("stray.safetensors"), {make_f32("l.0.b", {2}, {0, 0})});
  write_index(dir.file(kIndexName), {{"l.0.w", "model-00001-of-00002.safetensors"},
                                     {"l.0.b", "model-00001-of-00002.safetensors"},
                                     {"l.1.w", "model-00002-of-00002.safetensors"},
                                     {"mtp.w", "mtp.safetensors"}});
  test::write_bytes(dir.file("config.json"), R"({"model_type": "nemotron_h"})");
  test::write_bytes(dir.file("tokenizer.json"), R"({"model": {}})");

  for (const std::string& path : {dir.path(), dir.file(kIndexName)}) {
    auto ckpt = open_checkpoint(path);
    EXPECT_EQ(ckpt->tensors().size(), 4u);
    const RawTensor* w1 = ckpt->find("l.1.w");
    ASSERT_NE(w1, nullptr);
    EXPECT_EQ(w1->file, dir.file("model-00002-of-00002.safetensors"));
    EXPECT_EQ(test::ref_value("BF16", w1->data + 2 * 3), 10.0);
    EXPECT_EQ(test::ref_value("F32", ckpt->find("mtp.w")->data), 11.0);
    EXPECT_EQ(test::ref_value("F32", ckpt->find("l.0.b")->data + 4), 6.0);
    EXPECT_EQ(ckpt->config_json(), R"({"model_type": "nemotron_h"})");
    EXPECT_EQ(ckpt->side_file("tokenizer.json"), std::optional<std::string>(R"({"model": {}})"));
    EXPECT_EQ(ckpt->side_file("generation_config.json"), std::nullopt);
  }
}

TEST(SafetensorsReader, UnpaddedHeaderIsAccepted) {
  TempDir dir;
  // 2-byte values behind an odd-length header: the reader must not require alignment.
  std::string json = R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})";
  ASSERT_EQ(json.size() % 2, 1u);
  test::write_bytes(dir.file("odd.safetensors"), test::u64_le(json.size()) + json + std::string("\x80\x3f\x00\xc0", 4));
  auto ckpt = open_checkpoint(dir.file("odd.safetensors"));
  const RawTensor* w = ckpt->find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(test::ref_value("BF16", w->data), 1.0);
  EXPECT_EQ(test::ref_value("BF16", w->data + 2), -2.0);
}

TEST(SafetensorsReader, ProbePath) {
  TempDir dir, empty, indexed;
  write_file(dir.file("m.safetensors"), {make_f32("x", {1}, {1})});
  test::write_bytes(dir.file("m.gguf"), "GGUF");
  test::write_bytes(indexed.file(kIndexName), R"({"weight_map":{}})");
  SafetensorsFormat fmt;
  EXPECT_EQ(fmt.probe_path(dir.path()), 100);
  EXPECT_EQ(fmt.probe_path(dir.file("m.safetensors")), 100);
  EXPECT_EQ(fmt.probe_path(indexed.path()), 100);
  EXPECT_EQ(fmt.probe_path(indexed.file(kIndexName)), 100);
  test::write_bytes(dir.file("pytorch_model.bin.index.json"), R"({"weight_map":{}})");
  EXPECT_EQ(fmt.probe_path(dir.file("pytorch_model.bin.index.json")), 0);
  EXPECT_EQ(fmt.probe_path(dir.file("m.gguf")), 0);
  EXPECT_EQ(fmt.probe_path(empty.path()), 0);
  EXPECT_EQ(fmt.probe_path(dir.file("absent.safetensors")), 0);
  EXPECT_EQ(fmt.open(dir.path())->tensors().size(), 1u);
}

// ---- rejected inputs: each error names the file or tensor, what was expected and what was found.

class BadFile : public ::testing::Test {
 protected:
  // Writes `bytes` as bad.safetensors and expects open() to fail naming the file and `parts`.
  void expect_rejected(const std::string& bytes, std::initializer_list<std::string> parts) {
    std::string path = dir_.file("bad.safetensors");
    test::write_bytes(path, bytes);
    expect_error([&] { open_checkpoint(path); }, {"bad.safetensors"});
    expect_error([&] { open_checkpoint(path); }, parts);
  }
  TempDir dir_;
};

TEST_F(BadFile, TooShortForTheLengthField) {
  expect_rejected(std::string("\x05\x00\x00", 3), {"truncated", "at least 8 bytes", "found 3"});
}

TEST_F(BadFile, TruncatedData) {
  std::string ok = raw_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 16);
  expect_rejected(ok.substr(0, ok.size() - 5), {"'w'", "[0, 16]", "outside the data buffer of 11 bytes"});
}

TEST_F(BadFile, HeaderLengthPastEnd) {
  expect_rejected(test::u64_le(500) + "{}", {"header length 500", "past the end", "2 bytes"});
}

TEST_F(BadFile, HeaderLengthOverLimit) {
  expect_rejected(test::u64_le(100'000'001) + "{}", {"header length 100000001", "limit of 100000000"});
}

TEST_F(BadFile, InvalidJson) {
  expect_rejected(raw_file(R"({"w":{"dtype":"F32",)", 0), {"not valid JSON"});
  expect_rejected(raw_file(R"([1, 2])", 0), {"not an object"});
}

TEST_F(BadFile, UnknownDtype) {
  expect_rejected(raw_file(R"({"w":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}})", 1),
                  {"tensor 'w'", "dtype 'F7' unknown", "BF16"});
}

TEST_F(BadFile, NegativeShape) {
  expect_rejected(raw_file(R"({"w":{"dtype":"U8","shape":[2,-3],"data_offsets":[0,0]}})", 0),
                  {"tensor 'w'", "shape dimension is -3", "non-negative"});
  expect_rejected(raw_file(R"({"w":{"dtype":"U8","shape":[2.5],"data_offsets":[0,0]}})", 0),
                  {"tensor 'w'", "not an integer"});
}

TEST_F(BadFile, MissingFields) {
  expect_rejected(raw_file(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", 1), {"tensor 'w'", "'dtype'"});
  expect_rejected(raw_file(R"({"w":{"dtype":"U8","data_offsets":[0,1]}})", 1), {"tensor 'w'", "'shape'"});
  expect_rejected(raw_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", 1),
                  {"tensor 'w'", "'data_offsets'"});
  expect_rejected(raw_file(R"({"w":[1]})", 1), {"tensor 'w'", "expected an object"});
}

TEST_F(BadFile, OffsetsOutOfRange) {
  expect_rejected(raw_file(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", 6),
                  {"tensor 'w'", "[4, 8]", "outside the data buffer of 6 bytes"});
  expect_rejected(raw_file(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[3,2]}})", 6),
                  {"tensor 'w'", "[3, 2]", "end before they begin"});
}

TEST_F(BadFile, SizeDoesNotMatchShape) {
  expect_rejected(raw_file(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20),
                  {"tensor 'w'", "[2, 3]", "needs 24 bytes", "hold 20"});
  expect_rejected(raw_file(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8),
                  {"tensor 'w'", "more than 2^64"});
}

TEST_F(BadFile, OverlappingRanges) {
  expect_rejected(raw_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 6),
                  {"tensor 'b'", "overlap tensor 'a'", "[2, 6]"});
}

TEST_F(BadFile, GapInRanges) {
  expect_rejected(raw_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                           R"("b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})", 5),
                  {"tensor 'b'", "begin at 3, expected 2", "belong to no tensor"});
  expect_rejected(raw_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 5),
                  {"holds 5 bytes", "end at 2"});
}

TEST_F(BadFile, DuplicateNameInOneHeader) {
  expect_rejected(raw_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                           R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", 2),
                  {"tensor 'a'", "twice"});
}

TEST_F(BadFile, DeepNesting) {
  expect_rejected(raw_file(std::string(5000, '[') + std::string(5000, ']'), 0), {"nests deeper"});
}

TEST(BadFolder, IndexNamesMissingShard) {
  TempDir dir;
  write_file(dir.file("a.safetensors"), {make_f32("x", {1}, {1})});
  write_index(dir.file(kIndexName), {{"x", "a.safetensors"}, {"y", "b.safetensors"}});
  expect_error([&] { open_checkpoint(dir.path()); }, {kIndexName, "tensor 'y'", "'b.safetensors'", "no such file"});
}

TEST(BadFolder, IndexNamesTensorAbsentFromShard) {
  TempDir dir;
  write_file(dir.file("a.safetensors"), {make_f32("x", {1}, {1})});
  write_file(dir.file("b.safetensors"), {make_f32("y", {1}, {1})});
  write_index(dir.file(kIndexName), {{"x", "a.safetensors"}, {"y", "a.safetensors"}, {"z", "b.safetensors"}});
  expect_error([&] { open_checkpoint(dir.path()); }, {kIndexName, "tensor 'y'", "'a.safetensors'", "does not hold"});
}

TEST(BadFolder, IndexNamesInvalidShard) {
  TempDir dir;
  test::write_bytes(dir.file("a.safetensors"), raw_file(R"({"x":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}})", 1));
  write_index(dir.file(kIndexName), {{"x", "a.safetensors"}});
  expect_error([&] { open_checkpoint(dir.path()); }, {"a.safetensors", "tensor 'x'", "dtype 'Q9'"});
}

TEST(BadFolder, BadIndexJson) {
  TempDir dir;
  test::write_bytes(dir.file(kIndexName), R"({"weight_map": ["a"]})");
  expect_error([&] { open_checkpoint(dir.path()); }, {kIndexName, "'weight_map'"});
  test::write_bytes(dir.file(kIndexName), R"({"weight_map": {"x": 3}})");
  expect_error([&] { open_checkpoint(dir.path()); }, {kIndexName, "'x'", "not a file name"});
  test::write_bytes(dir.file(kIndexName), R"({"weight_map": {}})");
  expect_error([&] { open_checkpoint(dir.path()); }, {kIndexName, "lists no tensors"});
  test::write_bytes(dir.file(kIndexName), R"({"weight_map": )");
  expect_error([&] { open_checkpoint(dir.path()); }, {kIndexName, "not valid JSON"});
}

TEST(BadFolder, DuplicateTensorAcrossShards) {
  TempDir dir;
  write_file(dir.file("a.safetensors"), {make_f32("x", {1}, {1}), make_f32("dup", {1}, {1})});
  write_file(dir.file("b.safetensors"), {make_f32("dup", {1}, {2})});
  expect_error([&] { open_checkpoint(dir.path()); }, {"tensor 'dup'", "a.safetensors", "b.safetensors"});
  write_index(dir.file(kIndexName), {{"x", "a.safetensors"}, {"dup", "b.safetensors"}});
  expect_error([&] { open_checkpoint(dir.path()); }, {"tensor 'dup'", "a.safetensors", "b.safetensors"});
}

TEST(BadFolder, EmptyFolderAndMissingPath) {
  TempDir dir;
  expect_error([&] { open_checkpoint(dir.path()); }, {dir.path(), "neither", kIndexName});
  expect_error([&] { open_checkpoint(dir.file("nope.safetensors")); }, {"nope.safetensors", "does not exist"});
  test::write_bytes(dir.file("m.bin"), "x");
  expect_error([&] { open_checkpoint(dir.file("m.bin")); }, {"m.bin", "*.safetensors"});
}

TEST(BadFolder, MissingConfigOnlyWhenAsked) {
  TempDir dir;
  write_file(dir.file("m.safetensors"), {make_f32("x", {1}, {1})});
  auto ckpt = open_checkpoint(dir.path());  // opening does not need config.json
  expect_error([&] { ckpt->config_json(); }, {"folder '" + dir.path() + "'", "no config.json"});
  auto single = open_checkpoint(dir.file("m.safetensors"));
  expect_error([&] { single->config_json(); }, {"folder '" + dir.path() + "'", "no config.json"});
}

TEST(SafetensorsWriter, RejectsBadTensors) {
  TempDir dir;
  std::string path = dir.file("w.safetensors");
  expect_error([&] { write_file(path, {WriteTensor{"t", "F32", {2}, std::vector<uint8_t>(7)}}); },
               {"tensor 't'", "needs 8 bytes", "found 7"});
  expect_error([&] { write_file(path, {WriteTensor{"t", "Q4", {1}, {0}}}); }, {"tensor 't'", "dtype 'Q4'"});
  expect_error([&] { write_file(path, {make_f32("t", {1}, {1}), make_f32("t", {1}, {1})}); }, {"tensor 't'", "twice"});
  expect_error([&] { make_bf16("t", {2, 2}, {1, 2, 3}); }, {"tensor 't'", "needs 4 values", "found 3"});
  expect_error([&] { write_file(dir.file("no/such/dir/w.safetensors"), {}); }, {"no/such/dir/w.safetensors"});
}

}  // namespace
}  // namespace tandem::safetensors
