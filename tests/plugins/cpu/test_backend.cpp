// CpuBackend memory and copies, and the plugin module loaded through the registry.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "cpu_test.h"
#include "plugins/cpu/cpu_backend.h"
#include "tandem/registry.h"
#include "test_util.h"

namespace tandem::test {
namespace {

TEST(CpuBackend, AllocIsAlignedAndZeroed) {
  cpu::CpuBackend be;
  EXPECT_EQ(be.device(), "cpu");
  for (size_t bytes : {size_t(0), size_t(1), size_t(1000), size_t(1) << 20}) {
    auto buf = be.alloc(bytes);
    ASSERT_NE(buf->data(), nullptr);
    EXPECT_EQ(buf->bytes(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf->data()) % 64, 0u);
    const auto* p = static_cast<const unsigned char*>(buf->data());
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; ++i) nonzero += p[i] != 0;
    EXPECT_EQ(nonzero, 0u) << bytes << " bytes";
  }
}

TEST(CpuBackend, UploadDownloadRoundTrip) {
  cpu::CpuBackend be;
  auto src = random_vec(257, 1);
  auto buf = be.alloc(src.size() * sizeof(float));
  be.upload(buf->data(), src.data(), src.size() * sizeof(float));
  std::vector<float> back(src.size(), NAN);
  be.download(back.data(), buf->data(), back.size() * sizeof(float));
  be.synchronize();
  EXPECT_EQ(std::memcmp(back.data(), src.data(), src.size() * sizeof(float)), 0);
  EXPECT_NE(error_of([&] { be.upload(nullptr, src.data(), 4); }).find("upload"), std::string::npos);
  EXPECT_NE(error_of([&] { be.download(back.data(), nullptr, 4); }).find("null source"),
            std::string::npos);
}

TEST(CpuBackend, SetThreads) {
  cpu::CpuBackend be;
  be.set_threads(3);
  EXPECT_EQ(thread_count(), 3);
  be.set_threads(0);
  EXPECT_GE(thread_count(), 1);
  EXPECT_NE(error_of([&] { be.set_threads(-1); }).find("thread count"), std::string::npos);
}

TEST(CpuBackend, LoadsAsPlugin) {
  PluginRegistry reg;
  reg.load_file(plugin_dir() + "/libtandem-cpu.so");
  bool found = false;
  for (const auto& p : reg.providers())
    found |= p.kind == TANDEM_KIND_BACKEND && p.name == "cpu" && p.device == "cpu";
  EXPECT_TRUE(found);
  auto be = reg.backend("cpu");
  ASSERT_TRUE(be);
  EXPECT_EQ(be->device(), "cpu");
  // An op through the loaded module, not the statically linked copy.
  std::vector<float> x = {-2.f, 3.f};
  be->relu2(Tensor::f32(x.data(), 1, 2));
  EXPECT_EQ(x[0], 0.f);
  EXPECT_EQ(x[1], 9.f);
}

}  // namespace
}  // namespace tandem::test
