// Quantizing one linear to EXL3 (spec/formats.md § 5.8): signs, Hadamard rotation, unit-RMS scales,
// a global scale search, then LDLQ over 16-row strips with a block-LDL of the rotated Hessian.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "formats/exl3/quantize.h"
#include "tandem/error.h"
#include "tandem/parallel.h"
#include "tandem/tensor.h"

namespace tandem::exl3 {

namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// m (rows × cols, row-major) ← (H_rows) · m: the 128-point Hadamard across rows, in blocks of 128 rows.
void hadamard_left(float* m, int64_t rows, int64_t cols) {
  const float scale = 1.0f / std::sqrt(float(kHad));
  parallel_for(cols, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t b = 0; b < rows; b += kHad)
      for (int h = 1; h < kHad; h *= 2)
        for (int i = 0; i < kHad; i += 2 * h)
          for (int j = i; j < i + h; ++j) {
            float* p = m + (b + j) * cols;
            float* q = m + (b + j + h) * cols;
            for (int64_t c = c0; c < c1; ++c) {
              float a = p[c], d = q[c];
              p[c] = a + d, q[c] = a - d;
            }
          }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) m[r * cols + c] *= scale;
  });
}

// m ← m · H_cols (each row, blocks of 128).
void hadamard_right(float* m, int64_t rows, int64_t cols) {
  parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) hadamard128(m + r * cols, cols);
  });
}

// The 256 stream-order values of tile (i, j) of a k × n matrix.
void gather_tile(const float* m, int64_t n, int64_t i, int64_t j, float out[256]) {
  for (int p = 0; p < 256; ++p) {
    int e = tile_perm(p);
    out[p] = m[(i * kTile + e / kTile) * n + j * kTile + e % kTile];
  }
}

// Encodes tile (i, j) of target t, writes its words and its decoded values into q (k × n).
void encode_into(const float* t, float* q, uint16_t* trellis, int64_t n, int64_t i, int64_t j, int K,
                 Codebook cb) {
  float x[256];
  uint16_t states[256];
  gather_tile(t, n, i, j, x);
  encode_tile(x, K, cb, states);
  pack_tile(states, K, trellis + (i * (n / kTile) + j) * kTile * K);
  const float* vals = codebook_values(cb);
  for (int p = 0; p < 256; ++p) {
    int e = tile_perm(p);
    q[(i * kTile + e / kTile) * n + j * kTile + e % kTile] = vals[states[p]];
  }
}

// The global scale: c multiplies the unit-RMS target; the error of a few sample tiles, measured in
// the target's own units (‖Q − c·X‖² / c²), picks c on a grid, then a parabola through the best
// point and its neighbours refines it.
float search_scale(const float* x, int64_t k, int64_t n, int K, Codebook cb) {
  const int64_t tiles = (k / kTile) * (n / kTile);
  // A few tiles are enough: after the rotation every tile looks alike (near-Gaussian, unit RMS).
  const int samples = int(std::min<int64_t>(tiles, std::clamp<int64_t>(tiles / 32, 2, 4)));
  std::vector<float> grid = {0.55f, 0.7f, 0.85f, 1.0f, 1.15f, 1.3f};
  auto error = [&](float c) {
    std::vector<double> e(size_t(samples), 0.0);
    parallel_for(samples, 1, [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) {
        int64_t t = s * tiles / samples + (tiles / samples) / 2;
        float v[256];
        uint16_t states[256];
        gather_tile(x, n, t / (n / kTile), t % (n / kTile), v);
        for (float& f : v) f *= c;
        e[size_t(s)] = encode_tile(v, K, cb, states) / (double(c) * c);
      }
    });
    double sum = 0;
    for (double d : e) sum += d;
    return sum;
  };
  std::vector<double> err;
  for (float c : grid) err.push_back(error(c));
  size_t b = size_t(std::min_element(err.begin(), err.end()) - err.begin());
  if (b == 0 || b + 1 == grid.size()) return grid[b];
  double e0 = err[b - 1], e1 = err[b], e2 = err[b + 1], h = grid[b] - grid[b - 1];
  double den = e0 - 2 * e1 + e2;
  if (den <= 0) return grid[b];
  float c = float(grid[b] + 0.5 * h * (e0 - e2) / den);
  double ec = error(c);
  return ec < e1 ? c : grid[b];
}

// In-place lower Cholesky of a (n × n, row-major, double); false when not positive definite.
bool cholesky(std::vector<double>& a, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    double d = a[size_t(j * n + j)];
    for (int64_t p = 0; p < j; ++p) d -= a[size_t(j * n + p)] * a[size_t(j * n + p)];
    if (!(d > 0)) return false;
    d = std::sqrt(d);
    a[size_t(j * n + j)] = d;
    parallel_for(n - j - 1, 64, [&](int64_t i0, int64_t i1) {
      for (int64_t i = j + 1 + i0; i < j + 1 + i1; ++i) {
        double s = a[size_t(i * n + j)];
        const double* ri = &a[size_t(i * n)];
        const double* rj = &a[size_t(j * n)];
        for (int64_t p = 0; p < j; ++p) s -= ri[p] * rj[p];
        a[size_t(i * n + j)] = s / d;
      }
    });
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) a[size_t(i * n + j)] = 0;
  return true;
}

// The rotated, damped Hessian H' = H_k·diag(suh)·(H + δI)·diag(suh)·H_k (k × k), then its block LDL:
// returns L (k × k, float) with unit 16 × 16 diagonal blocks; only the strictly block-lower part is
// used.
std::vector<float> block_ldl(const float* h, int64_t in, int64_t k, const std::vector<float>& suh, double damping) {
  double mean = 0;
  for (int64_t i = 0; i < in; ++i) mean += h[i * in + i];
  mean /= double(in);
  if (!(mean > 0) || !std::isfinite(mean)) mean = 1;
  std::vector<float> r(size_t(k * k), 0.0f);
  for (int64_t i = 0; i < in; ++i)
    for (int64_t j = 0; j < in; ++j) r[size_t(i * k + j)] = h[i * in + j];
  for (double extra = damping;; extra *= 4) {
    std::vector<float> m = r;
    for (int64_t i = 0; i < k; ++i) m[size_t(i * k + i)] += float(extra * mean);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j) m[size_t(i * k + j)] *= suh[size_t(i)] * suh[size_t(j)];
    hadamard_left(m.data(), k, k);
    hadamard_right(m.data(), k, k);
    std::vector<double> c(m.begin(), m.end());
    if (!cholesky(c, k)) {
      check(extra < 1e3, "exl3 quantizer: the Hessian stays indefinite after damping ", extra);
      continue;
    }
    // L[:, b] = C[:, b] · C_bb⁻¹ for the rows below block b.
    std::vector<float> l(size_t(k * k), 0.0f);
    parallel_for(k / kTile, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t o = b * kTile;
        double inv[kTile][kTile] = {};  // inverse of the lower-triangular diagonal block
        for (int col = 0; col < kTile; ++col)
          for (int row = col; row < kTile; ++row) {
            double s = row == col ? 1.0 : 0.0;
            for (int p = col; p < row; ++p) s -= c[size_t((o + row) * k + o + p)] * inv[p][col];
            inv[row][col] = s / c[size_t((o + row) * k + o + row)];
          }
        for (int64_t i = o + kTile; i < k; ++i)
          for (int col = 0; col < kTile; ++col) {
            double s = 0;
            for (int p = col; p < kTile; ++p) s += c[size_t(i * k + o + p)] * inv[p][col];
            l[size_t(i * k + o + col)] = float(s);
          }
      }
    });
    return l;
  }
}

}  // namespace

QuantizedLinear quantize_linear(const float* w, int64_t out_features, int64_t in_features, const float* h,
                                const QuantOptions& o) {
  check(o.bits >= kMinBits && o.bits <= kMaxBits, "exl3 quantizer: bits per weight must be ", kMinBits, "..",
        kMaxBits, ", found ", o.bits);
  check(out_features > 0 && in_features > 0, "exl3 quantizer: empty weight [", out_features, ", ", in_features, "]");
  for (int64_t i = 0; i < out_features * in_features; ++i)
    check(std::isfinite(w[i]), "exl3 quantizer: weight element ", i, " is not finite");
  QuantizedLinear q;
  q.K = o.bits, q.codebook = o.codebook;
  q.in_features = in_features, q.out_features = out_features;
  const int64_t k = q.k = round_up(in_features, kHad), n = q.n = round_up(out_features, kHad);
  const double sigma = codebook_std(o.codebook);

  uint64_t rs = o.seed;
  std::vector<float> su(static_cast<size_t>(k)), sv(static_cast<size_t>(n));
  for (float& s : su) s = (splitmix(rs) & 1) ? -1.0f : 1.0f;
  for (float& s : sv) s = (splitmix(rs) & 1) ? -1.0f : 1.0f;

  // Output scales: each output channel's RMS. Then the input scales: the RMS of each input row of
  // Wᵀ·diag(sv/b)·H_n. Zero channels keep scale 1.
  std::vector<float> b(size_t(n), 1.0f), a(size_t(k), 1.0f);
  for (int64_t r = 0; r < out_features; ++r) {
    double s = 0;
    for (int64_t i = 0; i < in_features; ++i) s += double(w[r * in_features + i]) * w[r * in_features + i];
    if (s > 0) b[size_t(r)] = float(std::sqrt(s / double(in_features)));
  }
  auto rotated = [&](const std::vector<float>& ri, const std::vector<float>& ro, bool rows_first) {
    // H_k · diag(ri) · Wᵀ · diag(ro) · H_n; rows_first stops after the right-hand side (for a).
    std::vector<float> m(size_t(k * n), 0.0f);
    for (int64_t r = 0; r < out_features; ++r)
      for (int64_t i = 0; i < in_features; ++i)
        m[size_t(i * n + r)] = w[r * in_features + i] * ro[size_t(r)] * (rows_first ? 1.0f : ri[size_t(i)]);
    hadamard_right(m.data(), k, n);
    if (!rows_first) hadamard_left(m.data(), k, n);
    return m;
  };
  {
    std::vector<float> ro(static_cast<size_t>(n));
    for (int64_t c = 0; c < n; ++c) ro[size_t(c)] = sv[size_t(c)] / b[size_t(c)];
    std::vector<float> m = rotated({}, ro, true);
    for (int64_t i = 0; i < in_features; ++i) {
      double s = 0;
      for (int64_t c = 0; c < n; ++c) s += double(m[size_t(i * n + c)]) * m[size_t(i * n + c)];
      if (s > 0) a[size_t(i)] = float(std::sqrt(s / double(n)));
    }
    std::vector<float> ri(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) ri[size_t(i)] = su[size_t(i)] / a[size_t(i)] * float(sigma);
    m = rotated(ri, ro, false);
    q.global_scale = search_scale(m.data(), k, n, o.bits, o.codebook);
  }

  // The stored scales (fp16), and the target recomputed from exactly them.
  q.suh.resize(static_cast<size_t>(k)), q.svh.resize(static_cast<size_t>(n));
  std::vector<float> suh(static_cast<size_t>(k)), svh(static_cast<size_t>(n)), ri(static_cast<size_t>(k)), ro(static_cast<size_t>(n));
  for (int64_t i = 0; i < k; ++i) {
    q.suh[size_t(i)] = f32_to_f16(float(su[size_t(i)] * a[size_t(i)] / (q.global_scale * sigma)));
    suh[size_t(i)] = f16_to_f32(q.suh[size_t(i)]);
    ri[size_t(i)] = suh[size_t(i)] != 0 ? 1.0f / suh[size_t(i)] : 0.0f;
  }
  for (int64_t c = 0; c < n; ++c) {
    q.svh[size_t(c)] = f32_to_f16(sv[size_t(c)] * b[size_t(c)]);
    svh[size_t(c)] = f16_to_f32(q.svh[size_t(c)]);
    ro[size_t(c)] = svh[size_t(c)] != 0 ? 1.0f / svh[size_t(c)] : 0.0f;
  }
  std::vector<float> t = rotated(ri, ro, false);

  q.trellis.assign(size_t((k / kTile) * (n / kTile) * kTile * o.bits), 0);
  std::vector<float> qv(static_cast<size_t>(k * n));
  const int64_t tn = n / kTile;
  if (!h || !o.ldlq) {
    parallel_for((k / kTile) * tn, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t x = t0; x < t1; ++x) encode_into(t.data(), qv.data(), q.trellis.data(), n, x / tn, x % tn, o.bits, o.codebook);
    });
    return q;
  }

  // LDLQ: strips from the last input rows to the first; each strip's target adds the feedback
  // Σ_{j > b} L_jbᵀ (T_j − Q_j) of the strips already quantized.
  std::vector<float> l = block_ldl(h, in_features, k, suh, o.damping);
  std::vector<float> err(size_t(k * n), 0.0f), strip(size_t(kTile * n));
  std::vector<float> target = t;  // rows get the feedback added before their strip is encoded
  for (int64_t sb = k / kTile - 1; sb >= 0; --sb) {
    const int64_t o0 = sb * kTile;
    parallel_for(kTile, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float* f = &target[size_t((o0 + r) * n)];
        for (int64_t i = o0 + kTile; i < k; ++i) {
          float li = l[size_t(i * k + o0 + r)];
          if (li == 0) continue;
          const float* e = &err[size_t(i * n)];
          for (int64_t c = 0; c < n; ++c) f[c] += li * e[c];
        }
      }
    });
    parallel_for(tn, 1, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) encode_into(target.data(), qv.data(), q.trellis.data(), n, sb, j, o.bits, o.codebook);
    });
    for (int64_t r = o0; r < o0 + kTile; ++r)
      for (int64_t c = 0; c < n; ++c) err[size_t(r * n + c)] = t[size_t(r * n + c)] - qv[size_t(r * n + c)];
  }
  return q;
}

}  // namespace tandem::exl3
