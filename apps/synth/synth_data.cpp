// Random rows for every type a synthetic model uses: dense (F32, F16, BF16) values from the weight's
// initializer, the EXL3 and ModelOpt parts, and the container's quantized blocks (Q8_0, IQ4_NL, IQ2_XXS, NVFP4),
// which its Writer makes, scaled to the weight's std.
#include "synth_data.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tandem/backend.h"
#include "tandem/error.h"
#include "tandem/parallel.h"
#include "tandem/random_bytes.h"
#include "tandem/tensor.h"

namespace tandem::synth {
namespace {

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Rng row_rng(uint64_t stream, int64_t row) { return Rng(mix64(stream + mix64(uint64_t(row) + 0x632be59bd9b4e019ull))); }

void put_f16(uint8_t* p, float v) {
  uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// Element i of a dense vector or matrix from its initializer.
float value(Init init, double stddev, Rng& r) {
  const double u = r.uniform();
  switch (init) {
    case Init::Linear:
    case Init::Embedding:
    case Init::Conv: return float((2.0 * u - 1.0) * std::sqrt(3.0) * stddev);
    case Init::Ones: return 1.0f;
    case Init::Zeros: return 0.0f;
    case Init::ALog: return float(std::log(1.0 + 15.0 * u));
    case Init::A: return float(-(1.0 + 15.0 * u));
    case Init::DtBias: {
      const double dt = std::exp(std::log(1e-3) + u * (std::log(0.1) - std::log(1e-3)));
      return float(dt + std::log(-std::expm1(-dt)));  // softplus⁻¹
    }
  }
  return 0.0f;
}

// The E4M3 (E4M3FN) code nearest to x, for |x| ≤ 448: codes 0x00…0x7E are the non-negative finite
// values in increasing order; 0x7F/0xFF (NaN) are never made.
uint8_t e4m3_code(float x) {
  static const std::vector<float> values = [] {
    std::vector<float> v(0x7F);
    for (int b = 0; b < 0x7F; ++b) {
      const int e = b >> 3, m = b & 7;
      v[size_t(b)] = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.0f + float(m) / 8.0f, e - 7);
    }
    return v;
  }();
  const float a = std::min(std::fabs(x), values.back());
  size_t i = size_t(std::lower_bound(values.begin(), values.end(), a) - values.begin());
  if (i > 0 && (i == values.size() || a - values[i - 1] <= values[i] - a)) --i;
  return uint8_t(i) | (x < 0 && i > 0 ? 0x80 : 0);
}

// The nvfp4 mix's ModelOpt tensors (synth_plan.h: kNvfp4BlockScale and the scale functions).
void modelopt_rows(const StoredTensor& t, const Weight& w, uint64_t stream, int64_t r0, int64_t r1, uint8_t* out) {
  auto scalar = [&](float v) {
    check(r0 >= 0 && r1 <= 1 && t.dtype == "F32", "synth: tensor '", t.name, "': a scale is one F32");
    for (int64_t r = r0; r < r1; ++r) std::memcpy(out + (r - r0) * 4, &v, 4);
  };
  switch (t.modelopt_part) {
    case StoredTensor::kNvfp4Weight:  // every nibble is a valid E2M1 code
      for (int64_t r = r0; r < r1; ++r) {
        Rng rng = row_rng(stream, r);
        random_bytes(rng, out + size_t(r - r0) * t.row_bytes, t.row_bytes);
      }
      return;
    case StoredTensor::kNvfp4BlockScale:
      std::memset(out, kNvfp4BlockScaleByte, size_t(r1 - r0) * t.row_bytes);
      return;
    case StoredTensor::kNvfp4GlobalScale: return scalar(nvfp4_weight_scale_2(w.stddev));
    case StoredTensor::kFp8Scale: return scalar(fp8_weight_scale(w.stddev));
    case StoredTensor::kInputScale: return scalar(kModeloptInputScale);
    case StoredTensor::kFp8Weight:
      for (int64_t r = r0; r < r1; ++r) {
        Rng rng = row_rng(stream, r);
        uint8_t* row = out + size_t(r - r0) * t.row_bytes;
        for (int64_t c = 0; c < t.row_len; ++c) row[c] = e4m3_code(float((2.0 * rng.uniform() - 1.0) * 448.0));
      }
      return;
  }
  fail("synth: tensor '", t.name, "': unknown ModelOpt part ", t.modelopt_part);
}

}  // namespace

uint64_t stream_id(uint64_t seed, uint64_t n) { return mix64(mix64(seed) ^ mix64(n + 0x2545f4914f6cdd1dull)); }

void generate_rows(const Plan& plan, const StoredTensor& t, uint64_t stream, int64_t r0, int64_t r1, uint8_t* out) {
  const Weight& w = plan.weights[size_t(t.weight)];
  if (t.scale) {  // a block type's tensor scale (NVFP4): the writer's, for the weight's std
    check(t.dtype == "F32" && r0 >= 0 && r1 <= 1, "synth: tensor '", t.name, "': a scale is one F32");
    const std::optional<float> s = plan.writer->companion_scale(t.scale_of, w.stddev);
    check(s.has_value(), "synth: tensor '", t.name, "': ", t.scale_of, " keeps no tensor scale");
    for (int64_t r = r0; r < r1; ++r) std::memcpy(out + (r - r0) * 4, &*s, 4);
    return;
  }
  if (t.modelopt_part != StoredTensor::kModeloptNone) return modelopt_rows(t, w, stream, r0, r1, out);
  if (t.exl3_part == StoredTensor::kExl3Trellis) {  // any word stream is a valid tail-biting trellis
    for (int64_t r = r0; r < r1; ++r) {
      Rng rng = row_rng(stream, r);
      random_bytes(rng, out + size_t(r - r0) * t.row_bytes, t.row_bytes);
    }
    return;
  }
  if (t.exl3_part == StoredTensor::kExl3Suh || t.exl3_part == StoredTensor::kExl3Svh) {
    // Random signs; |suh| = the initializer's std and |svh| = 1, so that W = suh·H·Ŵ·H·svh (Ŵ of unit
    // rms for mul1) has the initializer's scale and activations stay O(1).
    const float mag = t.exl3_part == StoredTensor::kExl3Suh ? float(w.stddev) : 1.0f;
    for (int64_t r = r0; r < r1; ++r) {
      Rng rng = row_rng(stream, r);
      uint8_t* row = out + size_t(r - r0) * t.row_bytes;
      for (int64_t c = 0; c < t.row_len; ++c) put_f16(row + c * 2, rng.next() & 1 ? -mag : mag);
    }
    return;
  }
  if (t.exl3_part == StoredTensor::kExl3Mul1) {
    const uint32_t marker = 0x83DCD12Du;
    for (int64_t r = r0; r < r1; ++r) std::memcpy(out + size_t(r - r0) * 4, &marker, 4);
    return;
  }
  // GGUF stores A itself (−exp(A_log)), HF stores A_log.
  const Init init = w.init == Init::ALog && is_gguf(plan.mix) ? Init::A : w.init;
  const std::string& type = t.dtype;
  if (type == "F32" || type == "F16" || type == "BF16") {
    for (int64_t r = r0; r < r1; ++r) {
      Rng rng = row_rng(stream, r);
      uint8_t* row = out + size_t(r - r0) * t.row_bytes;
      for (int64_t c = 0; c < t.row_len; ++c) {
        const float v = value(init, w.stddev, rng);
        if (type == "F32") std::memcpy(row + c * 4, &v, 4);
        else {
          const uint16_t h = type == "F16" ? f32_to_f16(v) : f32_to_bf16(v);
          std::memcpy(row + c * 2, &h, 2);
        }
      }
    }
    return;
  }
  check(init == Init::Linear || init == Init::Embedding, "synth: tensor '", t.name, "' of ", t.dtype,
        " needs a random initializer");
  const int64_t blocks = t.row_len / t.block_elems;
  for (int64_t r = r0; r < r1; ++r) {
    Rng rng = row_rng(stream, r);
    check(plan.writer->random_blocks(type, w.stddev, rng, out + size_t(r - r0) * t.row_bytes, blocks), "synth: tensor '",
          t.name, "': the ", plan.writer->extension(), " writer makes no random ", type, " blocks");
  }
}

void generate_rows_parallel(const Plan& plan, const StoredTensor& t, uint64_t stream, int64_t r0, int64_t r1,
                            uint8_t* out) {
  if (r1 <= r0) return;
  const int64_t grain = std::max<int64_t>(1, int64_t(1 << 16) / std::max<int64_t>(1, int64_t(t.row_bytes)));
  parallel_for(r1 - r0, grain, [&](int64_t a, int64_t b) {
    generate_rows(plan, t, stream, r0 + a, r0 + b, out + size_t(a) * t.row_bytes);
  });
}

}  // namespace tandem::synth
