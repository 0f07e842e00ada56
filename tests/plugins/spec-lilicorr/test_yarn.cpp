// Yarn RoPE (plugins/spec-lilicorr/yarn.*): the frequency table and attention factor against values
// computed independently, and rope_scaling in config.json reaching the backbone's table.
//
// The expected values below come from python3 with plain math (double precision, no torch), written
// from HF transformers' _compute_yarn_parameters:
//   cd(r) = dim·ln(orig/(2π·r)) / (2·ln base); lo, hi = cd(beta_fast), cd(beta_slow) (floor / ceil when
//   truncate), clamped to [0, dim − 1]; ramp_j = clamp((j − lo)/(hi − lo), 0, 1); pf_j = base^(2j/dim);
//   inv_freq_j = ramp_j/(factor·pf_j) + (1 − ramp_j)/pf_j; attention = get_mscale(factor, mscale) /
//   get_mscale(factor, mscale_all_dim) when both are set, else get_mscale(factor) = 0.1·ln(factor) + 1.
// yarn_table runs the tensor steps in f32 as torch does, so the comparison is relative, 2e-6 (a few f32
// ulps: base^(2j/dim) in f32 is the largest term).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "checkpoint.h"
#include "host_ops.h"
#include "synth.h"
#include "test_util.h"
#include "yarn.h"

using namespace tandem;
using namespace tandem::lilicorr;

namespace {

void expect_table(const RopeTable& t, const std::vector<double>& want, double scale) {
  ASSERT_EQ(t.inv_freq.size(), want.size());
  for (size_t j = 0; j < want.size(); ++j)
    EXPECT_NEAR(t.inv_freq[j], want[j], 2e-6 * want[j]) << "inv_freq[" << j << "]";
  EXPECT_NEAR(t.scale, scale, 1e-6) << "attention factor";
}

}  // namespace

TEST(LilicorrYarn, TableMatchesIndependentValues) {
  {
    // dim 16, base 1e4, factor 4, orig 4096, beta 32/1, truncate: lo 2, hi 6; attention 1 + 0.1 ln 4.
    YarnParams p;
    p.factor = 4, p.original_max_position_embeddings = 4096, p.beta_fast = 32, p.beta_slow = 1;
    expect_table(yarn_table(p, 16, 1e4),
                 {1.000000000e+00, 3.162277660e-01, 1.000000000e-01, 2.569350599e-02, 6.250000000e-03,
                  1.383496476e-03, 2.500000000e-04, 7.905694150e-05},
                 1.138629436111989);
    // The same without truncation: lo 2.6180602, hi 5.6283602.
    p.truncate = false;
    expect_table(yarn_table(p, 16, 1e4),
                 {1.000000000e+00, 3.162277660e-01, 1.000000000e-01, 2.861360881e-02, 6.556971521e-03,
                  1.285632031e-03, 2.500000000e-04, 7.905694150e-05},
                 1.138629436111989);
  }
  {
    // dim 32, base 1e6, factor 8, orig 8192, mscale 1, mscale_all_dim 0.5: lo 4, hi 9.
    YarnParams p;
    p.factor = 8, p.original_max_position_embeddings = 8192, p.beta_fast = 32, p.beta_slow = 1;
    p.mscale = 1.0, p.mscale_all_dim = 0.5;
    expect_table(yarn_table(p, 32, 1e6),
                 {1.000000000e+00, 4.216965034e-01, 1.778279410e-01, 7.498942093e-02, 3.162277660e-02,
                  1.100155182e-02, 3.655218614e-03, 1.126402510e-03, 3.000000000e-04, 5.271206293e-05,
                  2.222849263e-05, 9.373677617e-06, 3.952847075e-06, 1.666901790e-06, 7.029266565e-07,
                  2.964217132e-07},
                 1.094179988101349);
    // attention_factor written: taken as is.
    p.attention_factor = 0.75;
    EXPECT_FLOAT_EQ(yarn_table(p, 32, 1e6).scale, 0.75f);
  }
  {
    // beta 0 reads as HF's defaults (32, 1), as `or` does.
    YarnParams a, b;
    a.factor = b.factor = 4, a.original_max_position_embeddings = b.original_max_position_embeddings = 4096;
    a.beta_fast = 0, a.beta_slow = 0;
    b.beta_fast = 32, b.beta_slow = 1;
    EXPECT_EQ(yarn_table(a, 16, 1e4).inv_freq, yarn_table(b, 16, 1e4).inv_freq);
  }
}

TEST(LilicorrYarn, RopeTableRotatesByTheTable) {
  // One head of width 4, x = (1, 0, 0, 1): pair j is (x_j, x_{j+2}); at pos p it turns by p·f_j and
  // scales by `scale`.
  const float f[2] = {0.5f, 0.125f};
  std::vector<float> x = {1, 0, 0, 1};
  rope_table(x.data(), 1, 4, 3, f, 1.25f);
  EXPECT_NEAR(x[0], 1.25 * std::cos(1.5), 1e-6);
  EXPECT_NEAR(x[2], 1.25 * std::sin(1.5), 1e-6);
  EXPECT_NEAR(x[1], -1.25 * std::sin(0.375), 1e-6);
  EXPECT_NEAR(x[3], 1.25 * std::cos(0.375), 1e-6);
}

TEST(LilicorrYarn, ConfigRopeScalingBecomesTheBackboneTable) {
  test::TempDir dir;
  ModelDesc d;
  d.hidden = 64, d.vocab = 256;
  d.layers.resize(8);
  const std::string path = dir.file("yarn");
  write_synthetic(path, synth_geometry("tiny", d), 7);
  const std::string plain = test::read_file(path + "/config.json");
  const DrafterConfig base = parse_config(plain, "config.json");
  EXPECT_TRUE(base.backbone.rope_inv_freq.empty());

  auto with = [&](const std::string& rs) {
    std::string s = plain;
    const size_t at = s.find("\"block_size\"");
    EXPECT_NE(at, std::string::npos);
    s.insert(at, "\"rope_scaling\": " + rs + ", ");
    return s;
  };
  const DrafterConfig c = parse_config(
      with("{\"rope_type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 4096, "
           "\"beta_fast\": 32, \"beta_slow\": 1, \"mscale\": 1.0, \"mscale_all_dim\": 0.5}"),
      "config.json");
  YarnParams p;
  p.factor = 4, p.original_max_position_embeddings = 4096, p.mscale = 1.0, p.mscale_all_dim = 0.5;
  const RopeTable t = yarn_table(p, c.backbone.head_dim, c.backbone.rope_theta);
  EXPECT_EQ(c.backbone.rope_inv_freq, t.inv_freq);
  EXPECT_EQ(c.backbone.rope_scale, t.scale);
  EXPECT_NEAR(c.backbone.rope_scale, (0.1 * std::log(4.0) + 1) / (0.05 * std::log(4.0) + 1), 1e-6);

  test::expect_error([&] { parse_config(with("{\"rope_type\": \"yarn\", \"factor\": \"x\", "
                                             "\"original_max_position_embeddings\": 4096}"),
                                        "config.json"); },
                     {"config.json", "rope_scaling.factor", "number"});
  test::expect_error([&] { parse_config(with("{\"rope_type\": \"dynamic\", \"factor\": 2}"), "config.json"); },
                     {"config.json", "rope_scaling", "dynamic", "not supported"});
}
