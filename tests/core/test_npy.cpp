// .npy round trip and the HF fixture files.
#include <gtest/gtest.h>

#include <filesystem>

#include "tandem/error.h"
#include "tandem/npy.h"
#include "test_util.h"

using namespace tandem;

TEST(Npy, RoundTrip) {
  auto v = test::random_vec(3 * 5, 1);
  std::string p = (std::filesystem::temp_directory_path() / "tandem_npy_rt.npy").string();
  write_npy(p, v.data(), {3, 5});
  NpyArray a = read_npy(p);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(a.data, v);
  std::filesystem::remove(p);
}

TEST(Npy, ReadsNumpyWrittenFixture) {
  NpyArray a = read_npy(test::data_path("hf/latent/logits_7.npy"));
  EXPECT_EQ(a.shape, (std::vector<int64_t>{7, 256}));
}

TEST(Npy, RejectsOtherFiles) {
  EXPECT_THROW(read_npy(test::data_path("hf/latent/config.json")), Error);
  EXPECT_THROW(read_npy("/nonexistent.npy"), Error);
}
