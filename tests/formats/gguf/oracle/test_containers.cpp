// One tiny model in three containers, all run by tandem: an HF folder with BF16 safetensors, and GGUF
// files with every matrix F16 or Q8_0 (the same bf16-rounded values; vectors F32 in all three).
// F16 holds those values exactly, so its logits must equal the safetensors ones to fp32 rounding;
// Q8_0 rounds the weights (up to 0.4 % of a block's largest value), so its logits move by that
// rounding's effect, and top-1 must hold wherever BF16's margin clears it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "oracle_model.h"
#include "oracle_run.h"
#include "tandem/model.h"
#include "tests/formats/gguf/gguf_test_util.h"

namespace tandem::gguf::oracle {
namespace {

std::vector<float> run(const std::string& path, const std::string& format, const std::vector<int32_t>& prompt) {
  LoadOptions o;
  o.path = path;
  auto m = Model::load(o, test::host_plugins());
  EXPECT_EQ(m->format_name(), format) << path;
  auto seq = m->new_sequence(64);
  std::vector<float> logits;
  m->forward(*seq, prompt, ForwardMode::Prefill, logits, true);
  return logits;
}

TEST(GgufContainers, SameModelAsSafetensorsBf16AndGgufF16Q8_0) {
  test::TempDir dir;
  OracleSpec s;
  s.name = "containers";
  s.seed = 77;
  s.uniform_type = 1;
  const OracleModel f16 = build_oracle_model(s);
  write_hf_folder(f16, dir.path());
  write_gguf(dir.file("f16.gguf"), f16.metadata, f16.tensors);
  s.uniform_type = 8;
  const OracleModel q8 = build_oracle_model(s);
  write_gguf(dir.file("q8_0.gguf"), q8.metadata, q8.tensors);

  Comparison as_f16, as_q8;
  for (const auto& prompt : oracle_prompts({1, 17, 40}, 99)) {
    const std::vector<float> bf16 = run(dir.path(), "safetensors", prompt);
    as_f16.add(compare_logits(bf16, run(dir.file("f16.gguf"), "gguf", prompt), Dims::V));
    as_q8.add(compare_logits(bf16, run(dir.file("q8_0.gguf"), "gguf", prompt), Dims::V));
  }
  std::printf("safetensors BF16 vs GGUF F16: KL %.3g, max |Δlogit| %.3g, top-1 %d/%d\n", as_f16.mean_kl,
              as_f16.max_abs_dlogit, as_f16.positions - as_f16.top1_mismatches, as_f16.positions);
  std::printf("safetensors BF16 vs GGUF Q8_0: KL %.3g, max |Δlogit| %.3g, top-1 %d/%d (smallest BF16 margin %.3g)\n",
              as_q8.mean_kl, as_q8.max_abs_dlogit, as_q8.positions - as_q8.top1_mismatches, as_q8.positions,
              as_q8.min_ref_margin);
  EXPECT_EQ(as_f16.top1_mismatches, 0);
  EXPECT_LE(as_f16.max_abs_dlogit, 1e-4);
  // Q8_0's own weight rounding moves logits by up to 0.23 here (KL 9e-4): a top-1 change is allowed
  // only where BF16's margin is within twice the bound on that move (measured: none changed).
  EXPECT_LE(as_q8.mean_kl, 2.5e-3);
  EXPECT_LE(as_q8.max_abs_dlogit, 0.5);
  EXPECT_LT(as_q8.max_mismatch_margin, 1.0);
}

}  // namespace
}  // namespace tandem::gguf::oracle
