// The built module: exports only the entry point, describes one format provider, and the object it
// creates reads a checkpoint.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>

#include "formats/safetensors/safetensors_writer.h"
#include "st_test_util.h"
#include "tandem/plugin_abi.h"
#include "tandem/weights.h"
#include "test_util.h"

namespace tandem::safetensors {
namespace {

TEST(SafetensorsPlugin, EntryDescribesAFormatAndAWriter) {
  std::string path = tandem::test::plugin_dir() + "/libtandem-safetensors.so";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto entry = reinterpret_cast<tandem_plugin_entry_fn>(dlsym(lib, "tandem_plugin_entry"));
  ASSERT_NE(entry, nullptr);
  // Internals stay hidden: a symbol of the reader must not be visible.
  EXPECT_EQ(dlsym(lib, "_ZN6tandem11safetensors10parse_fileEPKhmRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"),
            nullptr);

  const tandem_plugin_desc* desc = entry();
  EXPECT_EQ(desc->abi_version, TANDEM_PLUGIN_ABI_VERSION);
  EXPECT_EQ(desc->struct_size, sizeof(tandem_plugin_desc));
  EXPECT_STREQ(desc->name, "safetensors");
  ASSERT_EQ(desc->n_providers, 2u);
  const tandem_provider& p = desc->providers[0];
  EXPECT_EQ(p.kind, uint32_t(TANDEM_KIND_FORMAT));
  EXPECT_STREQ(p.name, "safetensors");
  EXPECT_STREQ(p.device, "");
  EXPECT_EQ(desc->providers[1].kind, uint32_t(TANDEM_KIND_WRITER));
  EXPECT_STREQ(desc->providers[1].name, "safetensors");
  EXPECT_STREQ(desc->providers[1].device, "");

  test::TempDir dir;
  write_file(dir.file("m.safetensors"), {make_bf16("x.weight", {1, 2}, {1, 2})});
  void* obj = nullptr;
  char err[256] = "";
  ASSERT_EQ(p.create(&obj, err, sizeof(err)), TANDEM_OK) << err;
  auto* fmt = static_cast<WeightFormat*>(obj);
  EXPECT_EQ(fmt->probe_path(dir.path()), 100);
  EXPECT_EQ(fmt->probe_path(dir.file("absent")), 0);
  {
    auto ckpt = fmt->open(dir.path());
    ASSERT_NE(ckpt->find("x.weight"), nullptr);
    EXPECT_EQ(ckpt->find("x.weight")->shape, (std::vector<int64_t>{1, 2}));
  }
  p.destroy(obj);
  dlclose(lib);
}

}  // namespace
}  // namespace tandem::safetensors
