// The chunked SSD scan of prefill (launch_scan_chunked, spec/nemotron_h.md § 3.6) on tensor cores:
// the three chunk products run as warp-level mma.sync m16n8k8 TF32 GEMMs in 3xTF32 form.
//
// Chunk length. The kernels cut a pass into chunks of Qc = ssd_chunk_len(dm.Q) tokens: the largest
// divisor of the model's chunk_size that is ≤ kSsdChunk = 64 (64 for Nemotron-H's 128). 64 rather
// than 128 keeps every operand tile of a block at 64 × 64 fp32 (36 KiB of static shared memory, no
// opt-in, several blocks per SM) and halves the O(Qc) work per token of the diagonal block. A divisor
// of chunk_size, because scan_chunked promises that passes split at multiples of chunk_size give the
// bits of one pass: that holds when every split falls on a chunk boundary. The chunks of a pass start
// at its first token; the last may be ragged (q < Qc tokens); its missing rows are zeros in every tile.
//
// Launches, per pass (s_in → s_out, y):
//   1. chunk_cumsum: Λ[h][t] = Σ Δ·A from the start of t's chunk through t (the workspace's lam).
//   Then per segment of at most kSegChunks chunks (the workspace holds one segment of states):
//   2. chunk_state: per (chunk c, head h, 64 × 64 tile of the [P, N] state) the chunk-local state
//      s_c = (w ∘ X)ᵀ B, w_j = exp(Λ_last − Λ_j)·Δ_j: a 64 × 64 GEMM with K = the chunk's tokens.
//   3. state_pass: per state element, sequential over the segment's chunks: overwrites s_c with the
//      state entering chunk c, S_{c−1}, and carries S_c = exp(Λ_last)·S_{c−1} + s_c; the last is the
//      new state (s_out). Elementwise, so s_out may be this segment's source (the next segment starts
//      from it).
//   4. chunk_out: per (chunk c, head h, 64-column tile of P) the [Qc, 64] output tile:
//        G = C Bᵀ (K = N, in 32-wide slices of N), Y = C S_{c−1}ᵀ in the same K loop (A = C shared);
//        Y ← diag(exp Λ) Y;  M = G ∘ L, L[i, j] = exp(Λ_i − Λ_j)·Δ_j for j ≤ i (else 0);
//        Y += M X (K = the chunk's tokens);  y = Y + D·x.
//      G is recomputed by each head of a group (ngroups: B and C are the group's, h / heads_per_group).
//
// Tiling. Every block has 4 warps; warp w owns rows 16w … 16w + 15 of its 64-row output tile and all
// 64 columns: 8 m16n8 accumulator tiles (32 floats a thread). Operands sit in shared memory as fp32 and
// are split into TF32 parts when a fragment is read. Row strides are ≡ 4 (mod 32) floats where a
// fragment walks the row (lanes g = lane/4 read rows, t = lane%4 read k: banks 4g + t) and ≡ 8 where
// it walks the column (banks 8t + g), so fragment reads are free of bank conflicts.
//
// Precision (3xTF32). A TF32 product keeps 10 mantissa bits of each operand, far from the fp32 the
// CPU scan and the test tolerance (1e-4 of the largest value) assume. Each fp32 operand is split as
// v = big + small, big = tf32(v), small = tf32(v − big) (v − big is exact in fp32), and a·b is
// accumulated as small_a·big_b + big_a·small_b + big_a·big_b in fp32: the dropped small·small term
// and the TF32 rounding of `small` leave an error of about 2^-21 relative to |a|·|b|, near fp32's own
// (bf16x3 would need three terms too, with fewer bits per part). States stay fp32 throughout.
// Determinism: every value depends only on its chunk's inputs and the state entering the chunk, in a
// fixed order, so a pass gives the same bits each run and passes split on the chunk grid match one.
#include <algorithm>

#include "tandem/cuda/util.cuh"
#include "scan_cuda.cuh"
#include "scan_layout.cuh"

namespace tandem::mamba2 {

using cuda::ceil_div;
using cuda::check_launch;

namespace {

constexpr int kT = kSsdChunk;     // tile edge: chunk rows, P columns, N columns
constexpr int kWarpsSsd = kT / 16;  // 4 warps, 16 tile rows each
constexpr int kThreadsSsd = 32 * kWarpsSsd;
constexpr int kSlice = 32;         // N columns per K step of chunk_out
constexpr int kLdRow = kT + 4;     // ≡ 4 (mod 32): fragments walk the row
constexpr int kLdCol = kT + 8;     // ≡ 8 (mod 32): fragments walk the column
constexpr int kLdSlice = kSlice + 4;
constexpr int kSegChunks = 16;     // chunks of states the workspace holds (16·nh·P·N floats)
constexpr int kPassThreads = 256;
static_assert(kT % 16 == 0 && kSlice % 8 == 0, "whole mma tiles");

// ---- 3xTF32 warp GEMM pieces ----
__device__ __forceinline__ uint32_t tf32_of(float v) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
  return r;
}

// The big and small TF32 parts of a fragment's registers.
template <int R>
struct Frag {
  uint32_t big[R], small[R];
  __device__ __forceinline__ void set(int i, float v) {
    big[i] = tf32_of(v);
    small[i] = tf32_of(v - __uint_as_float(big[i]));
  }
};

__device__ __forceinline__ void mma1688(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d += a·b in 3xTF32; the small products first, so they are not lost below the big one's rounding.
__device__ __forceinline__ void mma3x(float (&d)[4], const Frag<4>& a, const Frag<2>& b) {
  mma1688(d, a.small, b.big);
  mma1688(d, a.big, b.small);
  mma1688(d, a.big, b.big);
}

// The warp's A fragment for k-step k0 of a 16-row tile: a(r, k) reads row r (0 … 15) at column k.
// Registers: a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4), g = lane/4, t = lane%4.
template <class A>
__device__ __forceinline__ Frag<4> load_a(A a, int k0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  Frag<4> f;
  f.set(0, a(g, k0 + t));
  f.set(1, a(g + 8, k0 + t));
  f.set(2, a(g, k0 + t + 4));
  f.set(3, a(g + 8, k0 + t + 4));
  return f;
}

// acc[nt] += A(16 × 8) · B(8 × 8 columns 8nt …) for the warp's 64 columns; b(k, col) reads the B operand.
// B registers: b0 (k = t, col = g), b1 (k = t + 4, col = g).
template <class B>
__device__ __forceinline__ void mma_row(float (&acc)[kT / 8][4], const Frag<4>& a, B b, int k0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < kT / 8; ++nt) {
    Frag<2> f;
    f.set(0, b(k0 + t, 8 * nt + g));
    f.set(1, b(k0 + t + 4, 8 * nt + g));
    mma3x(acc[nt], a, f);
  }
}

// Accumulator element e (0 … 3) of tile nt sits at row g + 8·(e / 2), column 8nt + 2t + e % 2.
__device__ __forceinline__ int acc_row(int e) { return ((threadIdx.x & 31) >> 2) + 8 * (e >> 1); }
__device__ __forceinline__ int acc_col(int nt, int e) { return 8 * nt + 2 * (threadIdx.x & 3) + (e & 1); }

__device__ __forceinline__ int round8(int v) { return (v + 7) & ~7; }

__device__ __forceinline__ void zero(float (&acc)[kT / 8][4]) {
#pragma unroll
  for (int nt = 0; nt < kT / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
}

// ---- kernels ----

// lam[h·n + t] = Σ Δ·A from the start of t's chunk (length qc) through t.
__global__ void chunk_cumsum_kernel(int nh, const float* dt, int n, int qc, const float* a, float* lam) {
  const int t0 = blockIdx.x * qc;
  const int q = min(qc, n - t0);
  for (int h = threadIdx.x; h < nh; h += blockDim.x) {
    float run = 0.0f;
    for (int i = 0; i < q; ++i) {
      run = run + dt[int64_t(t0 + i) * nh + h] * a[h];
      lam[int64_t(h) * n + t0 + i] = run;
    }
  }
}

// Grid (P-tiles · N-tiles, chunks of the segment, nh). ds[c][h][p][k] = Σ_j w_j·x_j[p]·B_j[k].
__global__ void __launch_bounds__(kThreadsSsd)
    chunk_state_kernel(ScanLayout V, const float* xbc, const float* dt, int n, int qc, int c0, const float* lam,
                       float* ds) {
  __shared__ float xw[kT * kLdCol];  // xw[j][p] = w_j·x_j[p0 + p]: A(p, j), read down the column
  __shared__ float bs[kT * kLdCol];  // bs[j][k] = B_j[k0 + k]:      B(j, k), read down the column
  __shared__ float w[kT];
  const int ptiles = (V.P + kT - 1) / kT;
  const int p0 = (blockIdx.x % ptiles) * kT, k0 = (blockIdx.x / ptiles) * kT;
  const int c = blockIdx.y, h = blockIdx.z;
  const int t0 = (c0 + c) * qc, q = min(qc, n - t0);
  const float* lh = lam + int64_t(h) * n + t0;
  if (threadIdx.x < kT) {
    const int j = threadIdx.x;
    w[j] = j < q ? expf(lh[q - 1] - lh[j]) * dt[int64_t(t0 + j) * V.nh + h] : 0.0f;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kT * kT; idx += kThreadsSsd) {
    const int j = idx / kT, col = idx % kT;
    float xv = 0.0f, bv = 0.0f;
    if (j < q) {
      if (p0 + col < V.P) xv = w[j] * V.x(xbc, t0 + j, h)[p0 + col];
      if (k0 + col < V.N) bv = V.b(xbc, t0 + j, h)[k0 + col];
    }
    xw[j * kLdCol + col] = xv;
    bs[j * kLdCol + col] = bv;
  }
  __syncthreads();
  const int r0 = 16 * (threadIdx.x >> 5);
  float acc[kT / 8][4];
  zero(acc);
  const int kend = round8(q);  // rows past q are zero
  for (int kk = 0; kk < kend; kk += 8) {
    const Frag<4> fa = load_a([&](int r, int j) { return xw[j * kLdCol + r0 + r]; }, kk);
    mma_row(acc, fa, [&](int j, int col) { return bs[j * kLdCol + col]; }, kk);
  }
  float* out = ds + (int64_t(c) * V.nh + h) * V.P * V.N;
#pragma unroll
  for (int nt = 0; nt < kT / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int p = p0 + r0 + acc_row(e), k = k0 + acc_col(nt, e);
      if (p < V.P && k < V.N) out[int64_t(p) * V.N + k] = acc[nt][e];
    }
}

// Per state element (h, p, k), chunk after chunk of the segment: ds[c] ← the state entering chunk c;
// the state after the segment goes to s_out. Each thread reads its element of s_from before it writes
// that element of s_out, so the two may alias.
__global__ void state_pass_kernel(int nh, int64_t hs, int n, int qc, int c0, int nc, const float* lam, float* ds,
                                  const float* s_from, float* s_out) {
  const int64_t total = int64_t(nh) * hs;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int h = int(e / hs);
    float s = s_from[e];
    for (int c = 0; c < nc; ++c) {
      const int t0 = (c0 + c) * qc, q = min(qc, n - t0);
      const float decay = expf(lam[int64_t(h) * n + t0 + q - 1]);
      float* slot = ds + c * total + e;
      const float local = *slot;
      *slot = s;
      s = decay * s + local;
    }
    s_out[e] = s;
  }
}

// Grid (P-tiles, chunks of the segment, nh): y rows of chunk c, columns p0 … p0 + 63 of head h.
__global__ void __launch_bounds__(kThreadsSsd)
    chunk_out_kernel(ScanLayout V, const float* xbc, const float* dt, int n, int qc, int c0, const float* lam,
                     const float* d, const float* states, float* y) {
  // During the K loop over N: three [64][kLdSlice] slices. After it: M [64][kLdRow] and X [64][kLdCol].
  constexpr int kLoop = 3 * kT * kLdSlice, kAfter = kT * (kLdRow + kLdCol);
  __shared__ float smem[kLoop > kAfter ? kLoop : kAfter];
  __shared__ float lam_s[kT], dt_s[kT];
  float* cs = smem;                   // cs[i][k] = C_i[k0 + k]:          A(i, k), along the row
  float* bs = cs + kT * kLdSlice;     // bs[j][k] = B_j[k0 + k]:          B(k, j), along the row
  float* ss = bs + kT * kLdSlice;     // ss[p][k] = S_{c−1}[p0 + p][k0 + k]: B(k, p), along the row
  float* ms = smem;                   // ms[i][j] = M[i][j]:              A(i, j), along the row
  float* xs = smem + kT * kLdRow;     // xs[j][p] = x_j[p0 + p]:          B(j, p), down the column

  const int p0 = blockIdx.x * kT, c = blockIdx.y, h = blockIdx.z;
  const int t0 = (c0 + c) * qc, q = min(qc, n - t0);
  if (threadIdx.x < kT) {
    const int i = threadIdx.x;
    lam_s[i] = i < q ? lam[int64_t(h) * n + t0 + i] : 0.0f;
    dt_s[i] = i < q ? dt[int64_t(t0 + i) * V.nh + h] : 0.0f;
  }
  const float* sp = states + (int64_t(c) * V.nh + h) * V.P * V.N;
  const int r0 = 16 * (threadIdx.x >> 5);
  float gacc[kT / 8][4], yacc[kT / 8][4];
  zero(gacc);
  zero(yacc);
  for (int k0 = 0; k0 < V.N; k0 += kSlice) {
    __syncthreads();  // the previous slice has been read
    for (int idx = threadIdx.x; idx < kT * kSlice; idx += kThreadsSsd) {
      const int r = idx / kSlice, k = idx % kSlice;
      const bool kin = k0 + k < V.N;
      const bool tin = kin && r < q;
      cs[r * kLdSlice + k] = tin ? V.c(xbc, t0 + r, h)[k0 + k] : 0.0f;
      bs[r * kLdSlice + k] = tin ? V.b(xbc, t0 + r, h)[k0 + k] : 0.0f;
      ss[r * kLdSlice + k] = kin && p0 + r < V.P ? sp[int64_t(p0 + r) * V.N + k0 + k] : 0.0f;
    }
    __syncthreads();
    const int kend = min(kSlice, round8(V.N - k0));  // columns past N are zero
    for (int kk = 0; kk < kend; kk += 8) {
      const Frag<4> fa = load_a([&](int r, int k) { return cs[(r0 + r) * kLdSlice + k]; }, kk);
      mma_row(gacc, fa, [&](int k, int j) { return bs[j * kLdSlice + k]; }, kk);
      mma_row(yacc, fa, [&](int k, int p) { return ss[p * kLdSlice + k]; }, kk);
    }
  }
  __syncthreads();  // the slices are dead: M and X take their place

  // M = G ∘ L, masked to j ≤ i < q (exp is never taken of a positive exponent); Y ← exp(Λ_i)·Y.
#pragma unroll
  for (int nt = 0; nt < kT / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = r0 + acc_row(e), j = acc_col(nt, e);
      ms[i * kLdRow + j] = j <= i && i < q ? gacc[nt][e] * expf(lam_s[i] - lam_s[j]) * dt_s[j] : 0.0f;
    }
  const float e_lo = expf(lam_s[r0 + acc_row(0)]), e_hi = expf(lam_s[r0 + acc_row(2)]);
#pragma unroll
  for (int nt = 0; nt < kT / 8; ++nt) {
    yacc[nt][0] = yacc[nt][0] * e_lo, yacc[nt][1] = yacc[nt][1] * e_lo;
    yacc[nt][2] = yacc[nt][2] * e_hi, yacc[nt][3] = yacc[nt][3] * e_hi;
  }
  for (int idx = threadIdx.x; idx < kT * kT; idx += kThreadsSsd) {
    const int j = idx / kT, p = idx % kT;
    xs[j * kLdCol + p] = j < q && p0 + p < V.P ? V.x(xbc, t0 + j, h)[p0 + p] : 0.0f;
  }
  __syncthreads();
  const int kend = round8(q);  // M's columns and X's rows past q are zero
  for (int kk = 0; kk < kend; kk += 8) {
    const Frag<4> fa = load_a([&](int r, int j) { return ms[(r0 + r) * kLdRow + j]; }, kk);
    mma_row(yacc, fa, [&](int j, int p) { return xs[j * kLdCol + p]; }, kk);
  }
  const float dh = d[h];
#pragma unroll
  for (int nt = 0; nt < kT / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = r0 + acc_row(e), p = acc_col(nt, e);
      if (i < q && p0 + p < V.P)
        y[int64_t(t0 + i) * V.d_in + int64_t(h) * V.P + p0 + p] = yacc[nt][e] + dh * xs[i * kLdCol + p];
    }
}

}  // namespace

int ssd_chunk_len(int model_chunk) {
  check(model_chunk > 0, "mamba2 (cuda): chunk_size must be > 0, found ", model_chunk);
  int q = std::min(model_chunk, kSsdChunk);
  while (model_chunk % q != 0) --q;
  return q;
}

size_t scan_chunked_workspace_bytes(const Dims& dm, int n) {
  const int64_t chunks = ceil_div(std::max(n, 1), ssd_chunk_len(dm.Q));
  const int64_t states = std::min<int64_t>(chunks, kSegChunks) * dm.nh * dm.P * dm.N;
  return size_t(int64_t(dm.nh) * std::max(n, 1) + states) * sizeof(float);
}

void launch_scan_chunked(const Dims& dm, const ScanInput& in, const float* a, const float* d, const float* s_in,
                         float* s_out, float* y, void* workspace, cudaStream_t stream) {
  check(dm.N <= kMaxState, "mamba2 (cuda): state_size ", dm.N, " exceeds the kernels' limit ", kMaxState);
  check(dm.G > 0 && dm.nh % dm.G == 0 && dm.d_in == int64_t(dm.nh) * dm.P, "mamba2 scan_chunked: ", dm.nh,
        " heads of ", dm.P, " do not split into ", dm.G, " groups of d_inner ", dm.d_in);
  check(dm.nh <= 65535, "mamba2 scan_chunked: ", dm.nh, " heads exceed one launch (65535)");
  check(s_in != s_out, "mamba2 scan_chunked: s_out must not alias s_in");
  const int64_t hs = int64_t(dm.P) * dm.N;
  if (in.n == 0) {
    cuda::check_cuda(cudaMemcpyAsync(s_out, s_in, size_t(dm.nh * hs) * sizeof(float), cudaMemcpyDeviceToDevice, stream),
                     "mamba2 scan_chunked: copy state");
    return;
  }
  const ScanLayout V = layout_of(dm, in.xbc_stride);
  const int qc = ssd_chunk_len(dm.Q), n = in.n;
  const int chunks = int(ceil_div(n, qc));
  float* lam = static_cast<float*>(workspace);
  float* states = lam + int64_t(dm.nh) * n;
  chunk_cumsum_kernel<<<unsigned(chunks), 128, 0, stream>>>(dm.nh, in.dt, n, qc, a, lam);
  check_launch("mamba2 chunk_cumsum");
  const unsigned ptiles = unsigned(ceil_div(dm.P, kT)), ntiles = unsigned(ceil_div(dm.N, kT));
  const unsigned pass_blocks = unsigned(std::min<int64_t>(ceil_div(dm.nh * hs, kPassThreads), 65535 * 8));
  for (int c0 = 0; c0 < chunks; c0 += kSegChunks) {
    const int nc = std::min(kSegChunks, chunks - c0);
    const dim3 sgrid(ptiles * ntiles, unsigned(nc), unsigned(dm.nh));
    chunk_state_kernel<<<sgrid, kThreadsSsd, 0, stream>>>(V, in.xbc, in.dt, n, qc, c0, lam, states);
    check_launch("mamba2 chunk_state");
    // Segments after the first continue from the state the previous one left in s_out.
    state_pass_kernel<<<pass_blocks, kPassThreads, 0, stream>>>(dm.nh, hs, n, qc, c0, nc, lam, states,
                                                               c0 == 0 ? s_in : s_out, s_out);
    check_launch("mamba2 state_pass");
    const dim3 ogrid(ptiles, unsigned(nc), unsigned(dm.nh));
    chunk_out_kernel<<<ogrid, kThreadsSsd, 0, stream>>>(V, in.xbc, in.dt, n, qc, c0, lam, d, states, y);
    check_launch("mamba2 chunk_out");
  }
}

}  // namespace tandem::mamba2
