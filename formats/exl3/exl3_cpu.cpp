// Exl3Tensor: the EXL3 weight multiplied on the CPU without materializing it (exl3_cpu.h).
#include "formats/exl3/exl3_cpu.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "tandem/error.h"
#include "tandem/parallel.h"

namespace tandem::exl3 {
namespace {

// Every state's value for each codebook, as float: 3 × 256 KiB, built once on first use.
const float* value_table(Codebook cb) {
  static const std::array<std::vector<float>, 3> tables = [] {
    std::array<std::vector<float>, 3> t;
    for (int c = 0; c < 3; ++c) {
      t[size_t(c)].resize(65536);
      for (uint32_t s = 0; s < 65536; ++s) t[size_t(c)][s] = state_value(s, Codebook(c));
    }
    return t;
  }();
  return tables[size_t(cb)].data();
}

// tile_perm as a table: the decoder's inner loop stays free of calls.
const std::array<uint8_t, 256>& perm_table() {
  static const std::array<uint8_t, 256> t = [] {
    std::array<uint8_t, 256> p{};
    for (int i = 0; i < 256; ++i) p[size_t(i)] = uint8_t(tile_perm(i));
    return p;
  }();
  return t;
}

size_t member_bytes(const TensorGroup& g, const char* a, const char* b = nullptr) {
  const RawTensor* t = g.member(a);
  if (!t && b) t = g.member(b);
  return t ? t->nbytes : 0;
}

}  // namespace

void decode_tile_fast(const uint16_t* words, int K, Codebook cb, float out[256]) {
  const float* table = value_table(cb);
  const uint8_t* perm = perm_table().data();
  const int n_words = 8 * K, bits = 256 * K;
  uint32_t w[64];
  for (int i = 0; i < n_words; ++i) w[i] = uint32_t(words[2 * i]) | uint32_t(words[2 * i + 1]) << 16;
  for (int t = 0; t < 256; ++t) {
    // The 16-bit window ending at stream bit (t+1)·K lies within two consecutive (circular) words.
    const int b0 = ((t + 1) * K - 16 + bits) % bits;
    const int i0 = b0 / 32;
    const uint64_t pair = uint64_t(w[i0]) << 32 | w[(i0 + 1) % n_words];
    const uint32_t state = uint32_t(pair >> (48 - b0 % 32)) & 0xFFFFu;
    out[perm[t]] = table[state];
  }
}

Exl3Tensor::Exl3Tensor(const TensorGroup& group) : l_(parse_group(group)) {
  shape_ = {l_.out_features, l_.in_features};
  bytes_ = member_bytes(group, "trellis") + member_bytes(group, "suh", "su") + member_bytes(group, "svh", "sv") +
           member_bytes(group, "bias");
}

std::string Exl3Tensor::type_name() const {
  return "EXL3_K" + std::to_string(l_.K) + "_" + codebook_name(l_.codebook);
}

void Exl3Tensor::matmul_raw(const Tensor& x, const Tensor& y) const {
  const float* xs = x.f32();
  float* ys = y.f32();
  const int64_t n = x.rows, in = l_.in_features, out = l_.out_features, k = l_.k, N = l_.n;
  const int64_t tile_rows = k / kTile, tile_cols = N / kTile;

  // xh = H_k (pad(x) ⊙ suh), one row at a time.
  std::vector<float> xh(size_t(n * k));
  parallel_for(n, std::max<int64_t>(1, 4096 / k), [&](int64_t a0, int64_t a1) {
    for (int64_t a = a0; a < a1; ++a) {
      float* r = xh.data() + a * k;
      const float* src = xs + a * in;
      for (int64_t i = 0; i < in; ++i) r[i] = src[i] * l_.suh[size_t(i)];
      std::fill(r + in, r + k, 0.0f);
      hadamard128(r, k);
    }
  });

  // z = xh·Ŵ: each worker owns whole tile columns of z.
  std::vector<float> z(size_t(n * N), 0.0f);
  const int64_t work = tile_rows * kTile * kTile * (n + 4);
  parallel_for(tile_cols, std::max<int64_t>(1, (int64_t(1) << 16) / work), [&](int64_t j0, int64_t j1) {
    alignas(64) float tile[256];
    for (int64_t j = j0; j < j1; ++j)
      for (int64_t i = 0; i < tile_rows; ++i) {
        decode_tile_fast(l_.tile(i, j), l_.K, l_.codebook, tile);
        for (int64_t a = 0; a < n; ++a) {
          const float* xa = xh.data() + a * k + i * kTile;
          float* za = z.data() + a * N + j * kTile;
          float s[kTile];  // a local copy the compiler keeps in registers across the 16 rows
          std::memcpy(s, za, sizeof s);
          for (int r = 0; r < kTile; ++r) {
            const float xv = xa[r];
            const float* tr = tile + r * kTile;
            for (int c = 0; c < kTile; ++c) s[c] += xv * tr[c];
          }
          std::memcpy(za, s, sizeof s);
        }
      }
  });

  // y = trim(H_n z ⊙ svh) + bias.
  parallel_for(n, std::max<int64_t>(1, 4096 / N), [&](int64_t a0, int64_t a1) {
    for (int64_t a = a0; a < a1; ++a) {
      float* za = z.data() + a * N;
      hadamard128(za, N);
      float* ya = ys + a * out;
      for (int64_t o = 0; o < out; ++o) ya[o] = za[o] * l_.svh[size_t(o)];
      if (!l_.bias.empty())
        for (int64_t o = 0; o < out; ++o) ya[o] += l_.bias[size_t(o)];
    }
  });
}

void Exl3Tensor::get_rows(const int32_t* ids, int n, const Tensor& out) const {
  const int64_t in = l_.in_features, k = l_.k;
  check(out.dtype == DType::F32 && out.rows == n && out.cols == in, "get_rows: tensor '", l_.name, "': output is ",
        dtype_name(out.dtype), " [", out.rows, ", ", out.cols, "], expected f32 [", n, ", ", in, "]");
  for (int i = 0; i < n; ++i)
    check(ids[i] >= 0 && ids[i] < l_.out_features, "get_rows: tensor '", l_.name, "': id ", ids[i], " at position ",
          i, " is outside [0, ", l_.out_features, ")");
  parallel_for(n, 1, [&](int64_t p0, int64_t p1) {
    std::vector<float> u(static_cast<size_t>(k));
    alignas(64) float v[kHad], tile[256];
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t o = ids[p], block = o / kHad;
      // v = H_n (svh[o]·e_o) restricted to o's block; u = Ŵ v; row = suh ⊙ H_k u.
      std::fill(v, v + kHad, 0.0f);
      v[o % kHad] = l_.svh[size_t(o)];
      hadamard128(v, kHad);
      std::fill(u.begin(), u.end(), 0.0f);
      for (int64_t i = 0; i < k / kTile; ++i)
        for (int64_t jj = 0; jj < kHad / kTile; ++jj) {
          decode_tile_fast(l_.tile(i, block * (kHad / kTile) + jj), l_.K, l_.codebook, tile);
          const float* vj = v + jj * kTile;
          for (int r = 0; r < kTile; ++r) {
            float s = 0.0f;
            for (int c = 0; c < kTile; ++c) s += tile[r * kTile + c] * vj[c];
            u[size_t(i * kTile + r)] += s;
          }
        }
      hadamard128(u.data(), k);
      float* dst = out.row(p);
      for (int64_t i = 0; i < in; ++i) dst[i] = l_.suh[size_t(i)] * u[size_t(i)];
    }
  });
}

void Exl3Tensor::dequantize(float* out_host) const {
  std::vector<float> w = reconstruct(l_);
  std::memcpy(out_host, w.data(), w.size() * sizeof(float));
}

}  // namespace tandem::exl3
