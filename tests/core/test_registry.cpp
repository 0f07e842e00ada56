// Plugin registry: the built plugins load and register; every broken plugin gives a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "tandem/backend.h"
#include "tandem/error.h"
#include "tandem/layer.h"
#include "tandem/model_config.h"
#include "tandem/registry.h"
#include "test_util.h"

using namespace tandem;

namespace {

std::string fake(const std::string& c) { return std::string(TANDEM_BINARY_DIR) + "/test-plugins/" + c + "/libtandem-fake.so"; }

// Runs f, expects a tandem::Error whose message contains every needle.
template <class F>
std::string expect_error(F f, std::initializer_list<std::string> needles) {
  try {
    f();
  } catch (const Error& e) {
    std::string m = e.what();
    for (const auto& n : needles) EXPECT_NE(m.find(n), std::string::npos) << "message: " << m << "\nmissing: " << n;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line expected: " << m;
    return m;
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

}  // namespace

TEST(Registry, LoadsBuiltPluginsByKindNameDevice) {
  PluginRegistry reg;
  reg.load_directory(test::plugin_dir());
  bool cpu = false, st = false, mamba = false;
  for (const auto& p : reg.providers()) {
    cpu |= p.kind == TANDEM_KIND_BACKEND && p.name == "cpu";
    st |= p.kind == TANDEM_KIND_FORMAT && p.name == "safetensors";
    mamba |= p.kind == TANDEM_KIND_LAYER && p.name == "mamba2" && p.device == "cpu";
  }
  EXPECT_TRUE(cpu && st && mamba);
  auto be = reg.backend("cpu");
  EXPECT_EQ(be->device(), "cpu");
  EXPECT_EQ(reg.layer("mamba2", "cpu")->kind(), LayerKind::Mamba);
}

// A profile without `mamba:` gets the one layer plugin that declares Mamba layers for the device.
TEST(Registry, LayerForPicksTheOnePluginOfThatKind) {
  PluginRegistry reg;
  reg.load_directory(test::plugin_dir());
  EXPECT_EQ(reg.layer_for(LayerKind::Mamba, "cpu")->kind(), LayerKind::Mamba);
  expect_error([&] { reg.layer_for(LayerKind::Attention, "cpu"); },
               {"no layer plugin named for attention layers on device 'cpu'", "none is loaded", "mamba2/cpu"});
  expect_error([&] { reg.layer_for(LayerKind::Mamba, "tpu"); }, {"mamba layers on device 'tpu'", "none is loaded"});
}

TEST(Registry, LayerForNamesTheCandidatesWhenSeveralServeOneKind) {
  PluginRegistry reg;
  reg.load_directory(test::plugin_dir());
  reg.load_file(fake("layers"));
  const std::string m = expect_error([&] { reg.layer_for(LayerKind::Mamba, "cpu"); },
                                     {"mamba layers on device 'cpu'", "several are: 'mamba2', 'fake-mamba'",
                                      "name one in the profile"});
  EXPECT_EQ(m.find("fake-attention"), std::string::npos) << m;  // it declares another kind
  EXPECT_EQ(reg.layer_for(LayerKind::Attention, "cpu")->kind(), LayerKind::Attention);
}

TEST(Registry, DefaultDirectoryIsBesideTheCoreLibrary) {
  PluginRegistry reg;
  EXPECT_EQ(std::filesystem::weakly_canonical(reg.default_plugin_dir()),
            std::filesystem::weakly_canonical(test::plugin_dir()));
}

TEST(Registry, PluginPathEnvironmentAddsModules) {
  PluginRegistry reg;
  setenv("TANDEM_PLUGIN_PATH", (fake("score0") + ":" + std::string(TANDEM_BINARY_DIR) + "/test-plugins/dup1").c_str(), 1);
  reg.load_default();
  unsetenv("TANDEM_PLUGIN_PATH");
  EXPECT_NO_THROW(reg.format("fake-dup"));
  // The score-0 module is skipped (so are CUDA modules on a machine without a GPU).
  EXPECT_NE(std::find(reg.skipped().begin(), reg.skipped().end(), fake("score0")), reg.skipped().end());
  EXPECT_NO_THROW(reg.backend("cpu"));  // default directory loaded as well
}

TEST(Registry, MissingPlugin) {
  PluginRegistry reg;
  reg.load_directory(test::plugin_dir());
  expect_error([&] { reg.format("exl3-nonexistent"); }, {"no format plugin provides 'exl3-nonexistent'", "safetensors"});
  expect_error([&] { reg.backend("tpu"); }, {"no backend plugin provides 'tpu'", "available: ", "cpu"});
  expect_error([&] { reg.load_file("/nonexistent/libtandem-x.so"); }, {"/nonexistent/libtandem-x.so", "not found"});
  expect_error([&] { reg.load_directory("/nonexistent-dir"); }, {"/nonexistent-dir", "does not exist"});
}

TEST(Registry, AbiMismatch) {
  PluginRegistry reg;
  expect_error([&] { reg.load_file(fake("badabi")); }, {fake("badabi"), "ABI version 999", "expects " + std::to_string(TANDEM_PLUGIN_ABI_VERSION)});
  EXPECT_TRUE(reg.providers().empty());
}

TEST(Registry, InitFailure) {
  PluginRegistry reg;
  expect_error([&] { reg.load_file(fake("initfail")); }, {fake("initfail"), "failed to initialize", "no device found"});
  EXPECT_TRUE(reg.providers().empty());
}

TEST(Registry, TwoPluginsClaimOneName) {
  PluginRegistry reg;
  reg.load_file(fake("dup1"));
  expect_error([&] { reg.load_file(fake("dup2")); }, {fake("dup1"), fake("dup2"), "both provide format 'fake-dup'"});
  EXPECT_EQ(reg.providers().size(), 1u);
}

TEST(Registry, SameModuleTwiceIsLoadedOnce) {
  PluginRegistry reg;
  reg.load_file(fake("dup1"));
  EXPECT_NO_THROW(reg.load_file(fake("dup1")));
  EXPECT_EQ(reg.providers().size(), 1u);
}

TEST(Registry, ScoreZeroIsSkipped) {
  PluginRegistry reg;
  reg.load_file(fake("score0"));
  EXPECT_TRUE(reg.providers().empty());
  ASSERT_EQ(reg.skipped().size(), 1u);
  expect_error([&] { reg.format("fake-c"); }, {"no format plugin provides 'fake-c'"});
}

TEST(Registry, NotATandemPlugin) {
  PluginRegistry reg;
  expect_error([&] { reg.load_file(fake("noentry")); }, {fake("noentry"), "no tandem_plugin_entry"});
}

TEST(Registry, CreateFailureNamesPluginAndReason) {
  PluginRegistry reg;
  reg.load_file(fake("createfail"));
  expect_error([&] { reg.format("fake-broken"); }, {"fake-broken", "failed", "out of fake memory"});
}

TEST(Registry, PluginsExportOnlyTheEntryPoints) {
  // The version script hides everything else: dlsym of an internal symbol fails.
  std::string cmd = "nm -D --defined-only " + test::plugin_dir() + "/libtandem-cpu.so | awk '{print $3}' | grep -v '^$' | sort";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char line[512];
  std::vector<std::string> syms;
  while (fgets(line, sizeof line, p)) {
    std::string s(line);
    s.erase(s.find_last_not_of("\n") + 1);
    syms.push_back(s);
  }
  pclose(p);
  std::vector<std::string> want = {"tandem_plugin_entry"};
  EXPECT_EQ(syms, want);
}
