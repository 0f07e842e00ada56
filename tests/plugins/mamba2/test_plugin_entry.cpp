// Tests the module libtandem-mamba2.so itself: its entry point, provider and a mixer made through it.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>

#include "fakes.h"
#include "mixer_cpu.h"
#include "tandem/plugin_abi.h"

namespace tandem::mamba2::test {
namespace {

TEST(Mamba2Plugin, EntryPointMakesTheSameMixer) {
  const std::string path = tandem::test::plugin_dir() + "/libtandem-mamba2.so";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto entry = reinterpret_cast<tandem_plugin_entry_fn>(dlsym(lib, "tandem_plugin_entry"));
  ASSERT_NE(entry, nullptr);
  const tandem_plugin_desc* desc = entry();
  EXPECT_EQ(desc->abi_version, TANDEM_PLUGIN_ABI_VERSION);
  EXPECT_EQ(desc->struct_size, sizeof(tandem_plugin_desc));
  EXPECT_STREQ(desc->name, "mamba2");
  ASSERT_EQ(desc->n_providers, 1u);
  const tandem_provider& p = desc->providers[0];
  EXPECT_EQ(p.kind, uint32_t(TANDEM_KIND_LAYER));
  EXPECT_STREQ(p.name, "mamba2");
  EXPECT_STREQ(p.device, "cpu");
  EXPECT_EQ(dlsym(lib, "_ZN6tandem6mamba211Mamba2MixerC1ERKNS_9MambaDescEiRNS_12WeightLoaderERNS_7BackendE"),
            nullptr)
      << "only the entry points should be exported";

  void* obj = nullptr;
  char err[256] = {0};
  ASSERT_EQ(p.create(&obj, err, sizeof(err)), TANDEM_OK) << err;
  auto* factory = static_cast<LayerFactory*>(obj);
  EXPECT_EQ(factory->kind(), LayerKind::Mamba);

  LayerDesc ld;
  ld.mamba.n_heads = 4;
  ld.mamba.head_dim = 4;
  ld.mamba.n_groups = 2;
  ld.mamba.state_size = 8;
  ld.mamba.chunk_size = 4;
  const int hidden = 16, n = 7;
  MapLoader w = random_weights(ld.mamba, hidden, 42);
  TestBackend be;
  auto x = tandem::test::random_vec(n * hidden, 43);
  std::vector<float> got(n * hidden), want(n * hidden);
  {
    auto mixer = factory->create(ld, hidden, w, be);
    auto st = mixer->new_state(64);
    mixer->forward(Tensor::f32(x.data(), n, hidden), Tensor::f32(got.data(), n, hidden), *st,
                   ForwardInfo{0, n, ForwardMode::Prefill});
  }
  Mamba2Mixer direct(ld.mamba, hidden, w, be);
  auto st = direct.new_state(64);
  direct.forward(Tensor::f32(x.data(), n, hidden), Tensor::f32(want.data(), n, hidden), *st,
                 ForwardInfo{0, n, ForwardMode::Prefill});
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  p.destroy(obj);
  dlclose(lib);
}

}  // namespace
}  // namespace tandem::mamba2::test
