// Host kernels of the Mamba2 mixer. Every kernel splits work over channels, groups or heads only,
// so which thread runs an index never changes what it computes.
#include "scan_cpu.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tandem/error.h"
#include "tandem/parallel.h"

namespace tandem::mamba2 {

Dims Dims::from(const MambaDesc& d) {
  check(d.n_heads > 0, "mamba2: n_heads must be > 0, found ", d.n_heads);
  check(d.head_dim > 0, "mamba2: head_dim must be > 0, found ", d.head_dim);
  check(d.n_groups > 0, "mamba2: n_groups must be > 0, found ", d.n_groups);
  check(d.state_size > 0, "mamba2: state_size must be > 0, found ", d.state_size);
  check(d.n_heads % d.n_groups == 0, "mamba2: n_heads (", d.n_heads, ") must be a multiple of n_groups (",
        d.n_groups, ")");
  check(d.conv_kernel >= 2, "mamba2: conv_kernel must be >= 2, found ", d.conv_kernel);
  check(d.chunk_size > 0, "mamba2: chunk_size must be > 0, found ", d.chunk_size);
  Dims m;
  m.nh = d.n_heads;
  m.P = d.head_dim;
  m.G = d.n_groups;
  m.N = d.state_size;
  m.K = d.conv_kernel;
  m.Q = d.chunk_size;
  m.d_in = d.d_inner();
  m.conv_dim = d.conv_dim();
  m.rows = d.in_proj_rows();
  return m;
}

void conv_silu(const float* window, const float* u, int64_t u_stride, int n, const float* w,
               const float* bias, int64_t C, int K, float* out, int64_t out_stride) {
  const int W = K - 1;
  parallel_for(C, 256, [&](int64_t c0, int64_t c1) {
    for (int t = 0; t < n; ++t) {
      float* o = out + int64_t(t) * out_stride;
      for (int64_t c = c0; c < c1; ++c) {
        const float* wc = w + c * K;
        float acc = 0.0f;
        for (int j = 0; j < K; ++j) {
          const int src = t - W + j;  // position of tap j; negative = from the window
          const float v = src < 0 ? window[c * W + (W + src)] : u[int64_t(src) * u_stride + c];
          acc += wc[j] * v;
        }
        if (bias) acc += bias[c];
        o[c] = silu(acc);
      }
    }
  });
}

void shift_window(const float* window, const float* u, int64_t u_stride, int taken, int64_t C, int K,
                  float* out) {
  const int W = K - 1;
  for (int64_t c = 0; c < C; ++c)
    for (int r = 0; r < W; ++r) {
      const int src = taken + r;  // row in [window ; u]
      out[c * W + r] = src < W ? window[c * W + src] : u[int64_t(src - W) * u_stride + c];
    }
}

namespace {

struct HeadView {
  const Dims& dm;
  const ScanInput& in;
  const float* x(int t, int h) const { return in.xbc + t * in.xbc_stride + int64_t(h) * dm.P; }
  const float* b(int t, int h) const {
    return in.xbc + t * in.xbc_stride + dm.d_in + int64_t(h / dm.heads_per_group()) * dm.N;
  }
  const float* c(int t, int h) const {
    return in.xbc + t * in.xbc_stride + dm.d_in + int64_t(dm.G + h / dm.heads_per_group()) * dm.N;
  }
  float dt(int t, int h) const { return in.dt[int64_t(t) * dm.nh + h]; }
};

// Heads per task so that a task holds some thousands of flops.
int64_t head_grain(const Dims& dm, int n) {
  const int64_t work = int64_t(std::max(n, 1)) * dm.P * dm.N;
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(work, 1));
}

}  // namespace

void scan_steps(const Dims& dm, const ScanInput& in, const float* a, const float* d, const float* s_in,
                float* s_out, float* y) {
  const int64_t hs = int64_t(dm.P) * dm.N;
  const HeadView v{dm, in};
  parallel_for(dm.nh, head_grain(dm, in.n), [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
      const float* src = s_in + h * hs;
      float* dst = s_out + h * hs;
      if (in.n == 0 && dst != src) std::memcpy(dst, src, size_t(hs) * sizeof(float));
      for (int t = 0; t < in.n; ++t) {
        step_state(t == 0 ? src : dst, dst, v.x(t, int(h)), v.b(t, int(h)), v.dt(t, int(h)), a[h], dm.P,
                   dm.N);
        step_output(dst, v.x(t, int(h)), v.c(t, int(h)), d[h], y + t * dm.d_in + h * dm.P, dm.P, dm.N);
      }
    }
  });
}

void replay_steps(const Dims& dm, const ScanInput& in, const float* a, float* s) {
  const int64_t hs = int64_t(dm.P) * dm.N;
  const HeadView v{dm, in};
  parallel_for(dm.nh, head_grain(dm, in.n), [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h)
      for (int t = 0; t < in.n; ++t)
        step_state(s + h * hs, s + h * hs, v.x(t, int(h)), v.b(t, int(h)), v.dt(t, int(h)), a[h], dm.P,
                   dm.N);
  });
}

void scan_chunked(const Dims& dm, const ScanInput& in, const float* a, const float* d, const float* s_in,
                  float* s_out, float* y) {
  const int64_t hs = int64_t(dm.P) * dm.N;
  const int P = dm.P, N = dm.N, Q = dm.Q;
  const HeadView v{dm, in};
  std::memcpy(s_out, s_in, size_t(dm.nh * hs) * sizeof(float));
  // CB[g][i·Q + j] = C_i · B_j of group g, for j ≤ i; shared by the heads of the group.
  std::vector<float> cb(size_t(dm.G) * Q * Q);
  for (int t0 = 0; t0 < in.n; t0 += Q) {
    const int q = std::min(Q, in.n - t0);
    parallel_for(dm.G, 1, [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        const int h = int(g) * dm.heads_per_group();  // any head of group g reads its B and C
        float* m = cb.data() + g * Q * Q;
        for (int i = 0; i < q; ++i) {
          const float* ci = v.c(t0 + i, h);
          for (int j = 0; j <= i; ++j) {
            const float* bj = v.b(t0 + j, h);
            float acc = 0.0f;
            for (int n = 0; n < N; ++n) acc += ci[n] * bj[n];
            m[i * Q + j] = acc;
          }
        }
      }
    });
    parallel_for(dm.nh, 1, [&](int64_t h0, int64_t h1) {
      std::vector<float> lam(q);
      for (int64_t hh = h0; hh < h1; ++hh) {
        const int h = int(hh);
        float* s = s_out + hh * hs;
        const float* m = cb.data() + int64_t(h / dm.heads_per_group()) * Q * Q;
        float run = 0.0f;  // Λ_i: cumulative Δ·A within the chunk
        for (int i = 0; i < q; ++i) lam[i] = run += v.dt(t0 + i, h) * a[h];
        for (int i = 0; i < q; ++i) {
          float* yi = y + int64_t(t0 + i) * dm.d_in + int64_t(h) * P;
          // Off-diagonal: the state entering the chunk, decayed to position i.
          const float* ci = v.c(t0 + i, h);
          const float e = std::exp(lam[i]);
          for (int p = 0; p < P; ++p) {
            const float* sp = s + int64_t(p) * N;
            float acc = 0.0f;
            for (int n = 0; n < N; ++n) acc += sp[n] * ci[n];
            yi[p] = e * acc;
          }
          // Diagonal block: causal decay-masked "attention" inside the chunk.
          for (int j = 0; j <= i; ++j) {
            const float w = m[i * Q + j] * std::exp(lam[i] - lam[j]) * v.dt(t0 + j, h);
            const float* xj = v.x(t0 + j, h);
            for (int p = 0; p < P; ++p) yi[p] += w * xj[p];
          }
          const float* xi = v.x(t0 + i, h);
          for (int p = 0; p < P; ++p) yi[p] += d[h] * xi[p];
        }
        // State passing: S ← exp(Λ_last)·S + Σ_j exp(Λ_last − Λ_j)·Δ_j·x_j ⊗ B_j.
        const float last = lam[q - 1];
        const float e_last = std::exp(last);
        for (int64_t k = 0; k < hs; ++k) s[k] *= e_last;
        for (int j = 0; j < q; ++j) {
          const float w = std::exp(last - lam[j]) * v.dt(t0 + j, h);
          const float* xj = v.x(t0 + j, h);
          const float* bj = v.b(t0 + j, h);
          for (int p = 0; p < P; ++p) {
            const float wx = w * xj[p];
            float* sp = s + int64_t(p) * N;
            for (int n = 0; n < N; ++n) sp[n] += wx * bj[n];
          }
        }
      }
    });
  }
}

}  // namespace tandem::mamba2
