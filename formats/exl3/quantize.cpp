// The EXL3 tile encoders (tail-biting Viterbi and a greedy reference), codebook tables and the pack's
// tensors of one quantized linear. quant_linear.cpp quantizes whole linears.
#include "formats/exl3/quantize.h"

#include <array>
#include <cmath>
#include <cstring>

#include "formats/exl3/quant_viterbi.h"
#include "tandem/error.h"

namespace tandem::exl3 {

namespace {

struct Tables {
  std::array<std::vector<float>, 3> values;
  std::array<double, 3> stdev{};
};

const Tables& tables() {
  static const Tables t = [] {
    Tables r;
    for (int c = 0; c < 3; ++c) {
      auto& v = r.values[size_t(c)];
      v.resize(65536);
      double sum = 0, sq = 0;
      for (uint32_t s = 0; s < 65536; ++s) {
        v[s] = state_value(s, Codebook(c));
        sum += v[s], sq += double(v[s]) * v[s];
      }
      double mean = sum / 65536;
      r.stdev[size_t(c)] = std::sqrt(sq / 65536 - mean * mean);
    }
    return r;
  }();
  return t;
}

// Per-thread Viterbi buffers, sized for K = 1 (the largest group count).
struct Scratch {
  std::vector<float> cost = std::vector<float>(65536);
  std::vector<uint32_t> gm = std::vector<uint32_t>(32768);
  std::vector<uint8_t> bt = std::vector<uint8_t>(size_t(256) * 32768);
};

void pass(const float* vals, const float* x, int t0, int K, int start_ov, int end_ov, uint16_t* states) {
  thread_local Scratch s;
  static const bool avx2 = __builtin_cpu_supports("avx2");
  (avx2 ? detail::viterbi_pass_avx2 : detail::viterbi_pass_base)(vals, x, t0, K, start_ov, end_ov, states,
                                                                 s.cost.data(), s.gm.data(), s.bt.data());
}

double tile_error(const float* vals, const float* target, const uint16_t* states) {
  double e = 0;
  for (int p = 0; p < 256; ++p) {
    double d = double(vals[states[p]]) - target[p];
    e += d * d;
  }
  return e;
}

void check_bits(int K) {
  check(K >= kMinBits && K <= kMaxBits, "exl3 quantizer: bits per weight must be ", kMinBits, "..", kMaxBits,
        ", found ", K);
}

}  // namespace

const float* codebook_values(Codebook cb) { return tables().values[size_t(cb)].data(); }
double codebook_std(Codebook cb) { return tables().stdev[size_t(cb)]; }

Codebook parse_codebook(const std::string& name) {
  for (Codebook c : {Codebook::kMul1, Codebook::kMcg, Codebook::k3Inst})
    if (name == codebook_name(c)) return c;
  fail("exl3: unknown codebook '", name, "' (expected mul1, mcg or 3inst)");
}

bool states_consistent(const uint16_t states[256], int K) {
  const uint32_t low = (1u << (16 - K)) - 1;
  for (int t = 0; t < 256; ++t) {
    uint32_t prev = states[(t + 255) % 256];
    if ((prev & low) != uint32_t(states[t]) >> K) return false;
  }
  return true;
}

double encode_tile(const float target[256], int K, Codebook cb, uint16_t states[256]) {
  check_bits(K);
  const float* vals = codebook_values(cb);
  const int low = (1 << (16 - K)) - 1;
  // Pass 1 picks the overlap (the bits shared by the last state and the first) from a window that
  // wraps around the tile's end: positions 192..255 then 0..31, unconstrained at both ends.
  constexpr int kTail = 64, kHead = 32, kWin = kTail + kHead;
  float x[256];
  uint16_t st[256];
  for (int i = 0; i < kWin; ++i) x[256 - kWin + i] = target[(256 - kTail + i) % 256];
  pass(vals, x, 256 - kWin, K, -1, -1, st);
  const int ov = st[256 - kWin + kTail - 1] & low;  // the state at position 255
  // Pass 2: the whole tile with the first state's high bits and the last state's low bits both = ov.
  pass(vals, target, 0, K, ov, ov, states);
  return tile_error(vals, target, states);
}

double encode_tile_greedy(const float target[256], int K, Codebook cb, uint16_t states[256]) {
  check_bits(K);
  const float* vals = codebook_values(cb);
  // The first state is free; its high 16 − K bits are also the stream's last 16 − K bits, which
  // fixes the trailing symbols' bits. Every other symbol is the best one given the state before it.
  const int bits = 256 * K, fixed_from = bits - (16 - K);
  int s0 = 0;
  for (int s = 1; s < 65536; ++s)
    if (std::fabs(vals[s] - target[0]) < std::fabs(vals[s0] - target[0])) s0 = s;
  states[0] = uint16_t(s0);
  auto fixed_bit = [&](int b) { return (s0 >> (K + (bits - 1 - b))) & 1; };  // stream bit b ≥ fixed_from
  for (int t = 1; t < 256; ++t) {
    int best = -1;
    float be = 0;
    for (int sym = 0; sym < (1 << K); ++sym) {
      bool ok = true;
      for (int q = 0; q < K && ok; ++q) {
        int b = t * K + q;
        if (b >= fixed_from) ok = ((sym >> (K - 1 - q)) & 1) == fixed_bit(b);
      }
      if (!ok) continue;
      int s = ((states[t - 1] << K) | sym) & 0xFFFF;
      float e = std::fabs(vals[s] - target[t]);
      if (best < 0 || e < be) best = s, be = e;
    }
    states[t] = uint16_t(best);
  }
  return tile_error(vals, target, states);
}

std::vector<TensorSpec> linear_layout(int64_t out_features, int64_t in_features, int K, Codebook cb,
                                       const std::string& prefix) {
  const int64_t k = (in_features + kHad - 1) / kHad * kHad, n = (out_features + kHad - 1) / kHad * kHad;
  std::vector<TensorSpec> out = {{prefix + ".trellis", "I16", {k / kTile, n / kTile, int64_t(kTile) * K}},
                                                {prefix + ".suh", "F16", {k}},
                                                {prefix + ".svh", "F16", {n}}};
  if (cb == Codebook::kMul1) out.push_back({prefix + ".mul1", "I32", {}});
  if (cb == Codebook::kMcg) out.push_back({prefix + ".mcg", "I32", {}});
  return out;
}

std::vector<PackTensor> linear_tensors(const QuantizedLinear& q, const std::string& prefix) {
  std::vector<PackTensor> out;
  auto words = [](const std::vector<uint16_t>& v) {
    std::vector<uint8_t> b(v.size() * 2);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  auto layout = linear_layout(q.out_features, q.in_features, q.K, q.codebook, prefix);
  out.push_back({layout[0], words(q.trellis)});
  out.push_back({layout[1], words(q.suh)});
  out.push_back({layout[2], words(q.svh)});
  if (layout.size() > 3) {
    uint32_t m = q.codebook == Codebook::kMul1 ? kMul1Marker : kMcgMarker;
    std::vector<uint8_t> b(4);
    std::memcpy(b.data(), &m, 4);
    out.push_back({layout[3], b});
  }
  return out;
}

}  // namespace tandem::exl3
