// The reference fixture of tools/make_nvfp4_fixtures.py (tests/fixtures/nvfp4, README.md there): a
// tiny mixed-precision ModelOpt Nemotron-H quantized by ModelOpt's own quantizer, each quantized
// weight's decoding by vLLM's NVFP4 emulation (ModelOpt's FP8 dequantize), and HF transformers'
// float32 logits on those decoded weights. Shared by the CPU test and the CUDA one.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tandem/npy.h"
#include "test_util.h"

namespace tandem::nvfp4::test {

constexpr int kReferenceLens[] = {1, 7, 64};

inline std::string reference_dir(const std::string& name = "mixed") {
  return tandem::test::data_path("nvfp4/" + name);
}

// The fixture is made on a machine with torch and transformers and committed; until then, skip.
#define TANDEM_SKIP_WITHOUT_NVFP4_REFERENCE()                                                           \
  do {                                                                                                  \
    if (!std::filesystem::is_regular_file(::tandem::nvfp4::test::reference_dir() + "/model.safetensors")) \
      GTEST_SKIP() << "no " << ::tandem::nvfp4::test::reference_dir()                                   \
                   << "/model.safetensors: make it with tools/make_nvfp4_fixtures.py "                 \
                      "(docs/formats-nvfp4.md, 'Checked against independent code')";                    \
  } while (0)

struct LogitComparison {
  double max_abs = 0, peak = 0, mean_kl = 0, max_kl = 0;
  int top1_mismatches = 0, first_mismatch = -1;
};

// Ours against HF's [rows, vocab]: KL(P_hf ‖ P_ours) per row in double, top-1 per row.
inline LogitComparison compare_logits(const float* ours, const float* ref, int rows, int vocab) {
  LogitComparison c;
  for (int r = 0; r < rows; ++r) {
    const float* a = ours + size_t(r) * vocab;
    const float* b = ref + size_t(r) * vocab;
    double ma = a[0], mb = b[0];
    int ia = 0, ib = 0;
    for (int v = 0; v < vocab; ++v) {
      c.max_abs = std::max(c.max_abs, std::abs(double(a[v]) - b[v]));
      c.peak = std::max(c.peak, std::abs(double(b[v])));
      if (a[v] > ma) ma = a[v], ia = v;
      if (b[v] > mb) mb = b[v], ib = v;
    }
    double za = 0, zb = 0;
    for (int v = 0; v < vocab; ++v) za += std::exp(a[v] - ma), zb += std::exp(b[v] - mb);
    const double la = ma + std::log(za), lb = mb + std::log(zb);
    double kl = 0;
    for (int v = 0; v < vocab; ++v) {
      const double lp = b[v] - lb, lq = a[v] - la;
      kl += std::exp(lp) * (lp - lq);
    }
    c.mean_kl += kl / rows;
    c.max_kl = std::max(c.max_kl, kl);
    if (ia != ib && ++c.top1_mismatches == 1) c.first_mismatch = r;
  }
  return c;
}

}  // namespace tandem::nvfp4::test
