// The safetensors Writer (formats/safetensors/safetensors_file_writer.h): a streamed file, fed in
// chunks that cross tensor boundaries, is byte for byte what write_file writes; a short file is an
// error naming it; the plugins offer their writers and converters by name through the registry.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "formats/safetensors/safetensors_file.h"
#include "formats/safetensors/safetensors_file_writer.h"
#include "formats/safetensors/safetensors_writer.h"
#include "tandem/converter.h"
#include "tandem/registry.h"
#include "test_util.h"

namespace tandem {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<safetensors::WriteTensor> sample() {
  std::vector<float> a(6), b(5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i) * 0.5f - 1;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(i) * 3;
  return {safetensors::make_bf16("x.weight", {2, 3}, a), safetensors::make_f32("x.bias", {5}, b),
          {"x.mark", "I32", {}, {1, 2, 3, 4}}};
}

TEST(SafetensorsWriter, StreamedFileEqualsWriteFile) {
  test::TempDir dir("st-writer");
  const auto tensors = sample();
  safetensors::write_file(dir.file("ref.safetensors"), tensors);

  std::vector<TensorSpec> specs;
  std::string bytes;
  for (const auto& t : tensors) {
    specs.push_back({t.name, t.dtype, t.shape});
    bytes.append(t.data.begin(), t.data.end());
  }
  safetensors::SafetensorsWriter w;
  EXPECT_EQ(w.tensor_bytes(specs[0]), 12u);
  EXPECT_EQ(w.tensor_bytes(specs[2]), 4u);
  auto f = w.create(dir.file("out.safetensors"), specs, {});
  for (size_t i = 0; i < bytes.size(); i += 7) f->write(bytes.data() + i, std::min<size_t>(7, bytes.size() - i));
  f->close();
  EXPECT_EQ(slurp(dir.file("out.safetensors")), slurp(dir.file("ref.safetensors")));
}

TEST(SafetensorsWriter, ShortOrLongDataIsAnError) {
  test::TempDir dir("st-writer-short");
  safetensors::SafetensorsWriter w;
  const std::vector<TensorSpec> specs = {{"a", "F32", {4}}};
  auto f = w.create(dir.file("a.safetensors"), specs, {});
  const float v[5] = {1, 2, 3, 4, 5};
  f->write(v, 8);
  try {
    f->close();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a.safetensors': 8 bytes of tensor data missing"), std::string::npos) << e.what();
  }
  auto g = w.create(dir.file("b.safetensors"), specs, {});
  EXPECT_THROW(g->write(v, 20), Error);
  EXPECT_THROW(w.tensor_bytes({"q", "Q8_0", {32}}), Error);  // not a safetensors dtype
  EXPECT_FALSE(w.type_layout("IQ2_XXS").has_value());
}

TEST(PluginWriters, FoundByNameAndUnknownNamesListWhatIsThere) {
  PluginRegistry reg;
  reg.load_directory(test::plugin_dir());
  EXPECT_EQ(reg.writer("safetensors")->extension(), ".safetensors");
  EXPECT_EQ(reg.writer("gguf")->extension(), ".gguf");
  const auto opts = reg.converter("exl3")->options();
  EXPECT_NE(std::find_if(opts.begin(), opts.end(), [](const ConverterOption& o) { return o.name == "bits" && !o.help.empty(); }),
            opts.end());
  try {
    reg.writer("parquet");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("no writer plugin provides 'parquet'"), std::string::npos) << m;
    EXPECT_NE(m.find("safetensors"), std::string::npos) << m;
    EXPECT_NE(m.find("gguf"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  EXPECT_THROW(reg.converter("gguf"), Error);
}

}  // namespace
}  // namespace tandem
