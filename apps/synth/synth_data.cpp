// Random rows for every type a synthetic model uses: dense (F32, F16, BF16) values from the weight's
// initializer, and valid ggml blocks (Q8_0, IQ4_NL, IQ2_XXS, NVFP4) scaled to the weight's std.
#include "synth_data.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "formats/gguf/quant.h"
#include "tandem/backend.h"
#include "tandem/error.h"
#include "tandem/parallel.h"
#include "tandem/tensor.h"

namespace tandem::synth {
namespace {

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Rng row_rng(uint64_t stream, int64_t row) { return Rng(mix64(stream + mix64(uint64_t(row) + 0x632be59bd9b4e019ull))); }

// NVFP4 block scales: UE4M3 codes near 1.0 (0x38), so rows vary without leaving the format's range.
constexpr uint8_t kFp4ScaleLo = 0x34, kFp4ScaleSpan = 9;

void random_bytes(Rng& r, uint8_t* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = r.next();
    std::memcpy(p + i, &v, 8);
  }
  if (i < n) {
    uint64_t v = r.next();
    std::memcpy(p + i, &v, n - i);
  }
}

void put_f16(uint8_t* p, float v) {
  uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// One block of a block type: random quants, then the scale fields. `d` is the fp16 super-scale.
void random_block(int type, Rng& r, uint8_t* b, int block_bytes, float d) {
  random_bytes(r, b, size_t(block_bytes));
  switch (type) {
    case 8:   // Q8_0: d, qs[32]
    case 16:  // IQ2_XXS: d, qs (grid indices, signs and 4-bit sub-scales: every bit pattern is valid)
    case 20:  // IQ4_NL: d, qs
      put_f16(b, d);
      break;
    case 40:  // NVFP4: four UE4M3 block scales, then nibbles; the tensor scale is the sidecar
      for (int s = 0; s < 4; ++s) b[s] = uint8_t(kFp4ScaleLo + r.next() % kFp4ScaleSpan);
      break;
    default: fail("synth: no block generator for ggml type ", type);
  }
}

// RMS of the type's values at d = 1 (NVFP4: at tensor scale 1), from the CPU dequantizer.
double unit_rms(int type) {
  static std::mutex mu;
  static std::map<int, double> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(type); it != cache.end()) return it->second;
  const gguf::QuantType* q = gguf::find_type(type);
  check(q != nullptr, "synth: ggml type ", type, " has no CPU dequantizer to calibrate it with");
  constexpr int kBlocks = 4096;
  std::vector<uint8_t> blocks(size_t(kBlocks) * size_t(q->block_bytes));
  Rng r(0x5eed);
  for (int i = 0; i < kBlocks; ++i)
    random_block(type, r, blocks.data() + size_t(i) * size_t(q->block_bytes), q->block_bytes, 1.0f);
  std::vector<float> v(size_t(kBlocks) * size_t(q->block_elems));
  q->dequantize(blocks.data(), v.data(), int64_t(v.size()));
  double ss = 0;
  for (float x : v) ss += double(x) * double(x);
  return cache[type] = std::sqrt(ss / double(v.size()));
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

}  // namespace

uint64_t stream_id(uint64_t seed, uint64_t n) { return mix64(mix64(seed) ^ mix64(n + 0x2545f4914f6cdd1dull)); }

void generate_rows(const Plan& plan, const StoredTensor& t, uint64_t stream, int64_t r0, int64_t r1, uint8_t* out) {
  const Weight& w = plan.weights[size_t(t.weight)];
  if (t.scale) {  // NVFP4 tensor scale: the weight's std over the unit rms
    check(t.ggml_type == 0 && r0 >= 0 && r1 <= 1, "synth: tensor '", t.name, "': a scale is one F32");
    for (int64_t r = r0; r < r1; ++r) {
      const float s = float(w.stddev / unit_rms(40));
      std::memcpy(out + (r - r0) * 4, &s, 4);
    }
    return;
  }
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
  const Init init = w.init == Init::ALog && plan.mix == Mix::GgufIq2 ? Init::A : w.init;
  const int type = t.ggml_type;
  if (type == 0 || type == 1 || type == 30) {  // F32, F16, BF16
    for (int64_t r = r0; r < r1; ++r) {
      Rng rng = row_rng(stream, r);
      uint8_t* row = out + size_t(r - r0) * t.row_bytes;
      for (int64_t c = 0; c < t.row_len; ++c) {
        const float v = value(init, w.stddev, rng);
        if (type == 0) std::memcpy(row + c * 4, &v, 4);
        else {
          const uint16_t h = type == 1 ? f32_to_f16(v) : f32_to_bf16(v);
          std::memcpy(row + c * 2, &h, 2);
        }
      }
    }
    return;
  }
  check(init == Init::Linear || init == Init::Embedding, "synth: tensor '", t.name, "' of ", t.dtype,
        " needs a random initializer");
  const gguf::QuantType* q = gguf::find_type(type);
  check(q != nullptr, "synth: tensor '", t.name, "': no CPU kernels for ", t.dtype);
  const float d = type == 40 ? 1.0f : float(w.stddev / unit_rms(type));
  const int64_t blocks = t.row_len / q->block_elems;
  for (int64_t r = r0; r < r1; ++r) {
    Rng rng = row_rng(stream, r);
    uint8_t* row = out + size_t(r - r0) * t.row_bytes;
    for (int64_t b = 0; b < blocks; ++b) random_block(type, rng, row + b * q->block_bytes, q->block_bytes, d);
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
