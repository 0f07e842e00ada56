// tests/common/gpu_required.h: a GPU test that cannot run is skipped, or under TANDEM_REQUIRE_GPU=1
// fails with a message naming the cause. The macro's result is captured, not reported, so this
// test's own outcome stays "passed".
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "gpu_required.h"

namespace {

// Sets (or with nullptr unsets) TANDEM_REQUIRE_GPU for one scope, then restores it.
class RequireGpu {
 public:
  explicit RequireGpu(const char* value) {
    if (const char* v = std::getenv("TANDEM_REQUIRE_GPU")) old_ = v;
    if (value) setenv("TANDEM_REQUIRE_GPU", value, 1);
    else unsetenv("TANDEM_REQUIRE_GPU");
  }
  ~RequireGpu() {
    if (old_) setenv("TANDEM_REQUIRE_GPU", old_->c_str(), 1);
    else unsetenv("TANDEM_REQUIRE_GPU");
  }

 private:
  std::optional<std::string> old_;
};

void gpu_test_body(bool* ran_past) {
  TANDEM_GPU_UNAVAILABLE("cudaGetDeviceCount failed: cudaErrorInsufficientDriver");
  *ran_past = true;
}

// What the macro reports, captured: one result (a skip or a fatal failure), and whether the test body
// went on past it.
struct Outcome {
  int results = 0;
  bool skipped = false, failed = false, ran_past = false;
  std::string message;
};
Outcome run_gpu_test() {
  Outcome o;
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter capture(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    gpu_test_body(&o.ran_past);
  }
  o.results = results.size();
  if (o.results > 0) {
    const auto& r = results.GetTestPartResult(0);
    o.skipped = r.skipped();
    o.failed = r.fatally_failed();
    o.message = r.message();
  }
  return o;
}

}  // namespace

TEST(GpuRequired, OnlyOneMeansRequired) {
  using tandem::test::gpu_required;
  EXPECT_FALSE(gpu_required(nullptr));
  EXPECT_TRUE(gpu_required("1"));
  EXPECT_FALSE(gpu_required("0"));
  EXPECT_FALSE(gpu_required(""));
  EXPECT_FALSE(gpu_required("yes"));
}

TEST(GpuRequired, VerdictNamesTheCause) {
  const auto fail = tandem::test::gpu_unavailable_verdict("no CUDA device", true);
  EXPECT_TRUE(fail.fail);
  EXPECT_NE(fail.message.find("no CUDA device"), std::string::npos) << fail.message;
  EXPECT_NE(fail.message.find("TANDEM_REQUIRE_GPU=1"), std::string::npos) << fail.message;
  const auto skip = tandem::test::gpu_unavailable_verdict("no CUDA device", false);
  EXPECT_FALSE(skip.fail);
  EXPECT_NE(skip.message.find("no CUDA device"), std::string::npos) << skip.message;
}

TEST(GpuRequired, UnsetSkips) {
  RequireGpu env(nullptr);
  const Outcome o = run_gpu_test();
  ASSERT_EQ(o.results, 1);
  EXPECT_TRUE(o.skipped);
  EXPECT_FALSE(o.failed);
  EXPECT_FALSE(o.ran_past) << "the test body must stop at the skip";
  EXPECT_NE(o.message.find("cudaErrorInsufficientDriver"), std::string::npos) << o.message;
}

TEST(GpuRequired, RequiredFailsNamingTheCause) {
  RequireGpu env("1");
  const Outcome o = run_gpu_test();
  ASSERT_EQ(o.results, 1);
  EXPECT_TRUE(o.failed);
  EXPECT_FALSE(o.skipped);
  EXPECT_FALSE(o.ran_past) << "the test body must stop at the failure";
  EXPECT_NE(o.message.find("cudaErrorInsufficientDriver"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("TANDEM_REQUIRE_GPU=1"), std::string::npos) << o.message;
}
