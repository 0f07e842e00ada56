// EXL3 storage primitives: codebooks, tile order, bitstream, Hadamard, group parsing (trellis.h).
#include "formats/exl3/trellis.h"

#include <cmath>
#include <cstring>
#include <optional>

#include "tandem/error.h"
#include "tandem/tensor.h"

namespace tandem::exl3 {

const char* codebook_name(Codebook cb) {
  switch (cb) {
    case Codebook::k3Inst: return "3inst";
    case Codebook::kMcg: return "mcg";
    case Codebook::kMul1: return "mul1";
  }
  return "?";
}

uint16_t state_value_f16(uint32_t s, Codebook cb) {
  s &= 0xFFFFu;
  if (cb == Codebook::kMul1) {
    uint32_t x = s * 0x83DCD12Du;
    uint32_t bs = (x & 0xFF) + (x >> 8 & 0xFF) + (x >> 16 & 0xFF) + (x >> 24);
    // fma_fp16(1024 + bs, k_inv, k_bias): the exact result needs at most 22 significant bits (an
    // 11-bit integer times an 11-bit k_inv, plus k_bias on the same grid), so float holds it exactly
    // and f32_to_f16 is the single rounding.
    float h = float(1024 + bs);
    float v = h * f16_to_f32(0x1EEE) + f16_to_f32(0xC931);
    return f32_to_f16(v);
  }
  uint32_t x = cb == Codebook::kMcg ? s * 0xCBAC1FEDu : s * 89226354u + 64248484u;
  x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
  // Both halves are normal halves with |v| in [0.125, 2), so their float sum is exact: one rounding.
  return f32_to_f16(f16_to_f32(uint16_t(x & 0xFFFF)) + f16_to_f32(uint16_t(x >> 16)));
}

float state_value(uint32_t s, Codebook cb) { return f16_to_f32(state_value_f16(s, cb)); }

int tile_perm(int p) {
  int t = p / 8, jj = p % 8;
  static constexpr int kRowStep[4] = {0, 1, 8, 9};
  int r = (t % 4) * 2 + kRowStep[jj % 4];
  int c = t / 4 + (jj >= 4 ? 8 : 0);
  return r * kTile + c;
}

namespace {

// Stream bit b of a tile: bit 31 − b mod 32 of the little-endian u32 word b / 32.
inline uint32_t stream_word(const uint16_t* words, int i) { return uint32_t(words[2 * i]) | uint32_t(words[2 * i + 1]) << 16; }
inline int stream_bit(const uint16_t* words, int b) { return int(stream_word(words, b / 32) >> (31 - b % 32)) & 1; }

}  // namespace

void tile_states(const uint16_t* words, int K, uint16_t states[256]) {
  const int bits = 256 * K;
  for (int t = 0; t < 256; ++t) {
    uint32_t s = 0;
    int b0 = (t + 1) * K - 16 + bits;  // window start, kept non-negative before the modulo
    for (int q = 0; q < 16; ++q) s = s << 1 | uint32_t(stream_bit(words, (b0 + q) % bits));
    states[t] = uint16_t(s);
  }
}

void pack_tile(const uint16_t states[256], int K, uint16_t* words) {
  std::vector<uint32_t> w(size_t(8 * K), 0);
  for (int t = 0; t < 256; ++t)
    for (int q = 0; q < K; ++q) {
      int b = t * K + q;  // MSB-first: stream bit t·K + q is bit K − 1 − q of the symbol
      if (states[t] >> (K - 1 - q) & 1) w[size_t(b / 32)] |= 1u << (31 - b % 32);
    }
  for (int i = 0; i < 8 * K; ++i) {
    words[2 * i] = uint16_t(w[size_t(i)] & 0xFFFF);
    words[2 * i + 1] = uint16_t(w[size_t(i)] >> 16);
  }
}

void decode_tile(const uint16_t* words, int K, Codebook cb, float out[256]) {
  uint16_t states[256];
  tile_states(words, K, states);
  for (int p = 0; p < 256; ++p) out[tile_perm(p)] = state_value(states[p], cb);
}

void hadamard128(float* x, int64_t n) {
  const float scale = 1.0f / std::sqrt(float(kHad));
  for (int64_t b = 0; b < n; b += kHad) {
    float* v = x + b;
    for (int h = 1; h < kHad; h *= 2)
      for (int i = 0; i < kHad; i += 2 * h)
        for (int j = i; j < i + h; ++j) {
          float a = v[j], c = v[j + h];
          v[j] = a + c;
          v[j + h] = a - c;
        }
    for (int i = 0; i < kHad; ++i) v[i] *= scale;
  }
}

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// fp16 scales of length `len`, or legacy packed sign bits (int16, len/16 words, set bit = −1).
std::vector<float> read_scales(const TensorGroup& g, const char* half_name, const char* bits_name, int64_t len) {
  const RawTensor* h = g.member(half_name);
  const RawTensor* b = g.member(bits_name);
  check(h || b, "exl3: tensor '", g.prefix, ".", half_name, "' is missing (neither '", half_name, "' nor '",
        bits_name, "' is in the group ", g.describe(), ")");
  std::vector<float> out(static_cast<size_t>(len));
  if (h) {
    check(h->dtype == "F16", "exl3: tensor '", h->name, "': expected dtype F16, found ", h->dtype);
    check(h->shape == std::vector<int64_t>{len}, "exl3: tensor '", h->name, "': expected shape [", len, "], found ",
          shape_text(h->shape));
    for (int64_t i = 0; i < len; ++i) {
      uint16_t v;
      std::memcpy(&v, h->data + 2 * i, 2);
      out[size_t(i)] = f16_to_f32(v);
    }
    return out;
  }
  check(b->dtype == "I16", "exl3: tensor '", b->name, "': expected dtype I16, found ", b->dtype);
  check(b->shape == std::vector<int64_t>{len / 16}, "exl3: tensor '", b->name, "': expected shape [", len / 16,
        "], found ", shape_text(b->shape));
  for (int64_t i = 0; i < len; ++i) {
    uint16_t w;
    std::memcpy(&w, b->data + 2 * (i / 16), 2);
    out[size_t(i)] = (w >> (i % 16) & 1) ? -1.0f : 1.0f;
  }
  return out;
}

std::optional<uint32_t> marker(const TensorGroup& g, const char* name) {
  const RawTensor* t = g.member(name);
  if (!t) return std::nullopt;
  int64_t numel = 1;
  for (int64_t d : t->shape) numel *= d;
  check((t->dtype == "I32" || t->dtype == "U32") && numel == 1 && t->nbytes == 4, "exl3: tensor '", t->name,
        "': a codebook marker must be one I32 value, found ", t->dtype, " ", shape_text(t->shape));
  uint32_t v;
  std::memcpy(&v, t->data, 4);
  return v;
}

}  // namespace

bool is_exl3_group(const TensorGroup& g) {
  return g.member("trellis") && (g.member("suh") || g.member("su")) && (g.member("svh") || g.member("sv"));
}

Layout parse_group(const TensorGroup& g) {
  Layout l;
  l.name = g.prefix;
  const RawTensor* t = g.member("trellis");
  check(t != nullptr, "exl3: tensor '", g.prefix, ".trellis' is missing (group ", g.describe(), ")");
  check(t->dtype == "I16", "exl3: tensor '", t->name, "': expected dtype I16, found ", t->dtype);
  check(t->shape.size() == 3 && t->shape[0] > 0 && t->shape[1] > 0 && t->shape[2] > 0 && t->shape[2] % 16 == 0,
        "exl3: tensor '", t->name, "': expected shape [k/16, n/16, 16·K], found ", shape_text(t->shape));
  l.K = int(t->shape[2] / 16);
  check(l.K >= kMinBits && l.K <= kMaxBits, "exl3: tensor '", t->name, "': K = ", t->shape[2], "/16 = ", l.K,
        " bits per weight is out of range ", kMinBits, "..", kMaxBits);
  l.k = t->shape[0] * kTile;
  l.n = t->shape[1] * kTile;
  check(l.k % kHad == 0 && l.n % kHad == 0, "exl3: tensor '", t->name, "': shape ", shape_text(t->shape),
        " gives ", l.k, " × ", l.n, ", not multiples of ", kHad);
  check(t->nbytes == l.trellis_bytes(), "exl3: tensor '", t->name, "': ", t->nbytes, " bytes, expected ",
        l.trellis_bytes());
  l.trellis = reinterpret_cast<const uint16_t*>(t->data);

  auto mcg = marker(g, "mcg");
  auto mul1 = marker(g, "mul1");
  check(!(mcg && mul1), "exl3: group '", g.prefix, "' has both 'mcg' and 'mul1' codebook markers");
  if (mcg) {
    check(*mcg == kMcgMarker, "exl3: tensor '", g.prefix, ".mcg': unknown codebook marker ", *mcg, ", expected ",
          kMcgMarker);
    l.codebook = Codebook::kMcg;
  } else if (mul1) {
    check(*mul1 == kMul1Marker, "exl3: tensor '", g.prefix, ".mul1': unknown codebook marker ", *mul1, ", expected ",
          kMul1Marker);
    l.codebook = Codebook::kMul1;
  }

  l.suh = read_scales(g, "suh", "su", l.k);
  l.svh = read_scales(g, "svh", "sv", l.n);

  l.in_features = l.k, l.out_features = l.n;
  if (!g.shape.empty()) {
    check(g.shape.size() == 2 && g.shape[0] > 0 && g.shape[1] > 0 && g.shape[0] <= l.n && g.shape[1] <= l.k,
          "exl3: tensor '", t->name, "': stores ", l.n, " × ", l.k, " (out × in, padded), which cannot hold the expected ",
          shape_text(g.shape));
    l.out_features = g.shape[0], l.in_features = g.shape[1];
  }
  if (const RawTensor* b = g.member("bias")) {
    check(b->dtype == "F16", "exl3: tensor '", b->name, "': expected dtype F16, found ", b->dtype);
    check(b->shape.size() == 1 && (b->shape[0] == l.n || b->shape[0] == l.out_features), "exl3: tensor '", b->name,
          "': expected shape [", l.out_features, "], found ", shape_text(b->shape));
    l.bias.resize(size_t(l.out_features));
    for (int64_t i = 0; i < l.out_features; ++i) {
      uint16_t v;
      std::memcpy(&v, b->data + 2 * i, 2);
      l.bias[size_t(i)] = f16_to_f32(v);
    }
  }
  return l;
}

std::vector<float> decode_rotated(const Layout& l) {
  std::vector<float> w(size_t(l.k * l.n));
  float tile[256];
  for (int64_t i = 0; i < l.k / kTile; ++i)
    for (int64_t j = 0; j < l.n / kTile; ++j) {
      decode_tile(l.tile(i, j), l.K, l.codebook, tile);
      for (int r = 0; r < kTile; ++r)
        for (int c = 0; c < kTile; ++c) w[size_t((i * kTile + r) * l.n + j * kTile + c)] = tile[r * kTile + c];
    }
  return w;
}

std::vector<float> reconstruct(const Layout& l) {
  std::vector<float> w = decode_rotated(l);  // k × n
  // H_k from the left: columns of Ŵ; H_n from the right: rows. Both blockwise over 128.
  std::vector<float> col(size_t(l.k));
  for (int64_t c = 0; c < l.n; ++c) {
    for (int64_t r = 0; r < l.k; ++r) col[size_t(r)] = w[size_t(r * l.n + c)];
    hadamard128(col.data(), l.k);
    for (int64_t r = 0; r < l.k; ++r) w[size_t(r * l.n + c)] = col[size_t(r)];
  }
  for (int64_t r = 0; r < l.k; ++r) hadamard128(w.data() + r * l.n, l.n);
  std::vector<float> out(size_t(l.out_features * l.in_features));
  for (int64_t o = 0; o < l.out_features; ++o)
    for (int64_t i = 0; i < l.in_features; ++i)
      out[size_t(o * l.in_features + i)] = l.suh[size_t(i)] * w[size_t(i * l.n + o)] * l.svh[size_t(o)];
  return out;
}

}  // namespace tandem::exl3
