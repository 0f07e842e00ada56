// The plan of a grouped expert gather (issue 18), shared by the GGUF prefill GEMM (formats/gguf/
// gemm_cuda.cuh) and the dense tensor-core one (kernels/cuda/dense_tc.cu): the items of a gather
// (row r of y = W[ids[r]] · x[r / per_x]) sorted by expert on the device, and tiles of up to
// kTileRows items of one expert, so that one launch multiplies every expert's rows with each weight
// tile decoded once per tile. Rows whose id is out of range become NaN here.
// Owner: callers own every pointer. Thread: one caller per stream. Sync: launches are queued.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "tandem/cuda/util.cuh"

namespace tandem::cuda {

constexpr int kPlanWarps = 8;  // the plan's warps (its count table is kPlanWarps × experts)

// The most tiles a plan of `items` items over `n_experts` experts can have.
inline int64_t plan_max_tiles(int64_t items, int n_experts, int tile_rows) {
  return (items + tile_rows - 1) / tile_rows + std::min<int64_t>(n_experts, items);
}

// The grouped gather's plan, one block: the valid items (ids in [0, n_experts)) sorted by expert,
// ascending within each (a stable counting sort: each warp counts, then places, a contiguous segment
// in order), and the tiles of up to kTileRows items of one expert, experts ascending. Items with an id
// out of range get NaN rows here (the GEMM never sees them). Shared memory: (kPlanWarps + 3) × E ints.
// A template on the tile size, and on a tag (the caller's decoder or weight type) only so that each
// instance lives in its caller's file.
template <int kTileRows, class Tag>
__global__ void __launch_bounds__(kPlanWarps * 32) gather_plan_kernel(const int32_t* ids, int64_t n, int E,
                                                                      int64_t m, float* y, int32_t* items,
                                                                      int32_t* tile_e, int32_t* tile_start,
                                                                      int32_t* tile_len, int32_t* ntiles) {
  constexpr int T = kPlanWarps * 32;
  extern __shared__ int plan_smem[];
  int* cnt = plan_smem;          // [warp][e]: the warp's items of e, then the next slot for them
  int* tot = cnt + kPlanWarps * E;
  int* first = tot + E;          // first sorted slot of e
  int* tfirst = first + E;       // first tile of e
  __shared__ int part_rows[T], part_tiles[T];
  const int tid = int(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  for (int i = tid; i < kPlanWarps * E; i += T) cnt[i] = 0;
  cuda::pdl_wait();
  cuda::pdl_trigger();
  __syncthreads();
  const int64_t seg = (n + kPlanWarps - 1) / kPlanWarps, b = warp * seg, end = min(n, b + seg);
  for (int64_t t0 = b; t0 < end; t0 += 32) {
    const int64_t t = t0 + lane;
    const int e = t < end ? ids[t] : -1;
    const bool ok = e >= 0 && e < E;
    const unsigned same = __match_any_sync(0xffffffffu, ok ? e : -1);
    if (ok && lane == __ffs(same) - 1) cnt[warp * E + e] += __popc(same);
    __syncwarp();
  }
  __syncthreads();
  for (int e = tid; e < E; e += T) {
    int run = 0;
    for (int w = 0; w < kPlanWarps; ++w) {
      const int c = cnt[w * E + e];
      cnt[w * E + e] = run;
      run += c;
    }
    tot[e] = run;
  }
  __syncthreads();
  // Exclusive scans over e of the item and tile counts: a contiguous range of experts per thread.
  const int per = (E + T - 1) / T, e0 = min(E, tid * per), e1 = min(E, e0 + per);
  int sr = 0, st = 0;
  for (int e = e0; e < e1; ++e) sr += tot[e], st += (tot[e] + kTileRows - 1) / kTileRows;
  part_rows[tid] = sr, part_tiles[tid] = st;
  __syncthreads();
  if (tid == 0) {
    int ar = 0, at = 0;
    for (int i = 0; i < T; ++i) {
      const int r = part_rows[i], tt = part_tiles[i];
      part_rows[i] = ar, part_tiles[i] = at;
      ar += r, at += tt;
    }
    *ntiles = at;
  }
  __syncthreads();
  sr = part_rows[tid], st = part_tiles[tid];
  for (int e = e0; e < e1; ++e) {
    first[e] = sr, tfirst[e] = st;
    sr += tot[e], st += (tot[e] + kTileRows - 1) / kTileRows;
  }
  __syncthreads();
  for (int i = tid; i < kPlanWarps * E; i += T) cnt[i] += first[i % E];
  __syncthreads();
  for (int64_t t0 = b; t0 < end; t0 += 32) {
    const int64_t t = t0 + lane;
    const bool in = t < end;
    const int e = in ? ids[t] : -1;
    const bool ok = e >= 0 && e < E;
    const unsigned same = __match_any_sync(0xffffffffu, ok ? e : -1);
    if (ok) items[cnt[warp * E + e] + __popc(same & ((1u << lane) - 1u))] = int32_t(t);
    __syncwarp();
    if (ok && lane == __ffs(same) - 1) cnt[warp * E + e] += __popc(same);
    unsigned bad = __ballot_sync(0xffffffffu, in && !ok);
    while (bad) {
      const int l = __ffs(bad) - 1;
      bad &= bad - 1;
      float* yr = y + (t0 + l) * m;
      for (int64_t o = lane; o < m; o += 32) yr[o] = __int_as_float(0x7fc00000);
    }
    __syncwarp();
  }
  for (int e = tid; e < E; e += T) {
    const int ne = (tot[e] + kTileRows - 1) / kTileRows;
    for (int j = 0; j < ne; ++j) {
      tile_e[tfirst[e] + j] = e;
      tile_start[tfirst[e] + j] = first[e] + j * kTileRows;
      tile_len[tfirst[e] + j] = min(kTileRows, tot[e] - j * kTileRows);
    }
  }
}

// One block of kPlanWarps warps; tile_e, tile_start and tile_len hold plan_max_tiles(n, E, kTileRows)
// entries each, items n, ntiles one. max_experts bounds E for every call of this instance (the
// shared-memory opt-in is set once for it).
template <int kTileRows, class Tag>
void launch_gather_plan(const int32_t* ids, int64_t n, int E, int max_experts, int64_t m, float* y, int32_t* items,
                        int32_t* tile_e, int32_t* tile_start, int32_t* tile_len, int32_t* ntiles, cudaStream_t s,
                        const char* what) {
  check(E >= 1 && E <= max_experts, what, ": ", E, " experts, expected 1 .. ", max_experts);
  static const cudaError_t attr =
      cudaFuncSetAttribute(gather_plan_kernel<kTileRows, Tag>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           int(size_t(kPlanWarps + 3) * size_t(max_experts) * 4));
  check_cuda(attr, "gather plan: shared memory attribute");
  launch(gather_plan_kernel<kTileRows, Tag>, dim3(1), dim3(kPlanWarps * 32), size_t(kPlanWarps + 3) * size_t(E) * 4, s,
         what, ids, n, E, m, y, items, tile_e, tile_start, tile_len, ntiles);
}

}  // namespace tandem::cuda
