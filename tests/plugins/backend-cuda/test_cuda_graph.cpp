// Graph capture on the CUDA backend: attention_at (position in device memory) against attention
// (position by value), recorded attention_at passes replayed at later positions (up to 20k keys), and
// recordings that allocate or release a buffer being dropped; the TANDEM_CUDA_GRAPHS switch, which this
// backend reads; the node counts a recording reports (Graph::kernel_nodes, copy_nodes), which
// `tandem bench` prints; detached memory, whose release keeps recorded graphs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "cuda_test.h"

namespace tandem::test {
namespace {

constexpr int kNq = 4, kNkv = 2, kHd = 64, kCap = 300;
constexpr int64_t kQw = int64_t(kNq) * kHd, kKw = int64_t(kNkv) * kHd;

struct Caches {
  Dev<float> k, v;
};
Caches fresh_caches(Backend& be, uint64_t seed) {
  return {to_device(be, random_vec(size_t(kCap * kKw), seed, -1.f, 1.f)),
          to_device(be, random_vec(size_t(kCap * kKw), seed + 1, -1.f, 1.f))};
}

// Graphs start on unless TANDEM_CUDA_GRAPHS=0; only "0" switches them off (the documented rule).
TEST(CudaGraph, EnvironmentSwitchIsTheBackends) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  unsetenv("TANDEM_CUDA_GRAPHS");
  EXPECT_EQ(be.graphs_off_reason(), "");
  setenv("TANDEM_CUDA_GRAPHS", "0", 1);
  EXPECT_EQ(be.graphs_off_reason(), "TANDEM_CUDA_GRAPHS=0");
  setenv("TANDEM_CUDA_GRAPHS", "1", 1);
  EXPECT_EQ(be.graphs_off_reason(), "");
  unsetenv("TANDEM_CUDA_GRAPHS");
}

TEST(CudaGraph, AttentionAtEqualsAttention) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  for (int64_t n : {1, 5, 16}) {
    for (int64_t pos0 : {0, 1, 127, 200}) {
      auto q = to_device(be, random_vec(size_t(n * kQw), 10 + pos0, -1.5f, 1.5f));
      auto k = to_device(be, random_vec(size_t(n * kKw), 20 + pos0, -1.5f, 1.5f));
      auto v = to_device(be, random_vec(size_t(n * kKw), 30 + pos0, -1.f, 1.f));
      Caches a = fresh_caches(be, 40), b = fresh_caches(be, 40);
      auto oa = poisoned_device(be, size_t(n * kQw)), ob = poisoned_device(be, size_t(n * kQw));
      auto pos = to_device(be, std::vector<int64_t>{pos0});
      const Tensor tq = Tensor::f32(q.p(), n, kQw), tk = Tensor::f32(k.p(), n, kKw), tv = Tensor::f32(v.p(), n, kKw);
      be.attention(tq, tk, tv, a.k.p(), a.v.p(), kCap, pos0, kNq, kNkv, kHd, Tensor::f32(oa.p(), n, kQw));
      be.attention_at(tq, tk, tv, b.k.p(), b.v.p(), kCap, pos0, pos.p(), kNq, kNkv, kHd, Tensor::f32(ob.p(), n, kQw));
      EXPECT_TRUE(same_bits(to_host(be, oa), to_host(be, ob))) << "n " << n << " pos0 " << pos0;
      EXPECT_TRUE(same_bits(to_host(be, a.k), to_host(be, b.k))) << "n " << n << " pos0 " << pos0;
      EXPECT_TRUE(same_bits(to_host(be, a.v), to_host(be, b.v))) << "n " << n << " pos0 " << pos0;
    }
  }
}

TEST(CudaGraph, RecordedAttentionFollowsThePosition) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  const int64_t n = 3;
  auto q = to_device(be, random_vec(size_t(n * kQw), 1, -1.5f, 1.5f));
  auto k = to_device(be, random_vec(size_t(n * kKw), 2, -1.5f, 1.5f));
  auto v = to_device(be, random_vec(size_t(n * kKw), 3, -1.f, 1.f));
  const Tensor tq = Tensor::f32(q.p(), n, kQw), tk = Tensor::f32(k.p(), n, kKw), tv = Tensor::f32(v.p(), n, kKw);
  Caches rec = fresh_caches(be, 7), ref = fresh_caches(be, 7);
  auto orec = poisoned_device(be, size_t(n * kQw)), oref = poisoned_device(be, size_t(n * kQw));
  auto pos = to_device(be, std::vector<int64_t>{0});
  // The first pass of a shape allocates the split attention's workspace (Model runs each shape once
  // op by op before recording it, for the same reason).
  be.attention_at(tq, tk, tv, rec.k.p(), rec.v.p(), kCap, 0, pos.p(), kNq, kNkv, kHd, Tensor::f32(orec.p(), n, kQw));
  be.synchronize();

  ASSERT_TRUE(be.begin_capture());
  be.attention_at(tq, tk, tv, rec.k.p(), rec.v.p(), kCap, 0, pos.p(), kNq, kNkv, kHd, Tensor::f32(orec.p(), n, kQw));
  auto graph = be.end_capture();
  ASSERT_TRUE(graph != nullptr);
  for (int64_t pos0 : {0, 3, 6, 150, 290}) {
    be.upload(pos.p(), &pos0, sizeof(pos0));
    graph->launch();
    be.attention(tq, tk, tv, ref.k.p(), ref.v.p(), kCap, pos0, kNq, kNkv, kHd, Tensor::f32(oref.p(), n, kQw));
    EXPECT_TRUE(same_bits(to_host(be, orec), to_host(be, oref))) << "pos0 " << pos0;
    EXPECT_TRUE(same_bits(to_host(be, rec.k), to_host(be, ref.k))) << "pos0 " << pos0;
  }
}

// One recording of a decode (1 row) and of a verify pass (8 rows) of Bolt's attention shape, replayed
// at positions whose rows split their keys differently (split sizes change at 4096 and 20480 keys),
// against direct calls with the position by value. The first recording grows the workspace and is
// dropped, as the backend's contract says.
TEST(CudaGraph, RecordedSplitAttentionFollowsLongPositions) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  constexpr int nq = 32, nkv = 2, hd = 128;
  constexpr int64_t qw = int64_t(nq) * hd, kw = int64_t(nkv) * hd, cap = 20600;
  const auto kc0 = random_vec(size_t(cap * kw), 50, -1.5f, 1.5f), vc0 = random_vec(size_t(cap * kw), 51, -1.f, 1.f);
  bool first_recording = true;
  for (int64_t n : {1, 8}) {
    auto q = to_device(be, random_vec(size_t(n * qw), 60 + n, -1.5f, 1.5f));
    auto k = to_device(be, random_vec(size_t(n * kw), 70 + n, -1.5f, 1.5f));
    auto v = to_device(be, random_vec(size_t(n * kw), 80 + n, -1.f, 1.f));
    const Tensor tq = Tensor::f32(q.p(), n, qw), tk = Tensor::f32(k.p(), n, kw), tv = Tensor::f32(v.p(), n, kw);
    auto rk = to_device(be, kc0), rv = to_device(be, vc0), dk = to_device(be, kc0), dv = to_device(be, vc0);
    auto orec = poisoned_device(be, size_t(n * qw)), oref = poisoned_device(be, size_t(n * qw));
    auto pos = to_device(be, std::vector<int64_t>{0});
    be.synchronize();
    auto record_pass = [&] {
      if (!be.begin_capture()) return std::unique_ptr<Graph>();
      be.attention_at(tq, tk, tv, rk.p(), rv.p(), cap, 0, pos.p(), nq, nkv, hd, Tensor::f32(orec.p(), n, qw));
      return be.end_capture();
    };
    auto graph = record_pass();
    if (first_recording) {
      EXPECT_TRUE(graph == nullptr) << "a recording that allocated the workspace was kept";
      first_recording = false;
      be.attention_at(tq, tk, tv, rk.p(), rv.p(), cap, 0, pos.p(), nq, nkv, hd, Tensor::f32(orec.p(), n, qw));
      graph = record_pass();
    }
    ASSERT_TRUE(graph != nullptr) << "n " << n;
    for (int64_t pos0 : {int64_t(0), int64_t(5), int64_t(4090), int64_t(4096), int64_t(9000), int64_t(20477),
                         int64_t(20590)}) {
      be.upload(pos.p(), &pos0, sizeof(pos0));
      graph->launch();
      be.attention(tq, tk, tv, dk.p(), dv.p(), cap, pos0, nq, nkv, hd, Tensor::f32(oref.p(), n, qw));
      const auto got = to_host(be, orec), want = to_host(be, oref);
      EXPECT_TRUE(std::none_of(got.begin(), got.end(), [](float x) { return std::isnan(x); })) << "n " << n
                                                                                                << " pos0 " << pos0;
      EXPECT_TRUE(same_bits(got, want)) << "n " << n << " pos0 " << pos0;
    }
  }
}

TEST(CudaGraph, RecordingThatAllocatesOrReleasesIsDropped) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  auto x = to_device(be, random_vec(256, 1, -1.f, 1.f));
  const uint64_t e0 = be.memory_epoch();

  ASSERT_TRUE(be.begin_capture());
  be.relu2(Tensor::f32(x.p(), 1, 256));
  EXPECT_TRUE(be.end_capture() != nullptr);

  ASSERT_TRUE(be.begin_capture());
  auto scratch = be.alloc(1024);
  be.relu2(Tensor::f32(x.p(), 1, 256));
  EXPECT_TRUE(be.end_capture() == nullptr);
  EXPECT_EQ(be.memory_epoch(), e0);

  ASSERT_TRUE(be.begin_capture());
  scratch.reset();
  EXPECT_TRUE(be.end_capture() == nullptr);
  EXPECT_NE(be.memory_epoch(), e0);

  // A synchronizing call while recording fails, and the backend is usable afterwards.
  ASSERT_TRUE(be.begin_capture());
  std::vector<float> host(256);
  EXPECT_THROW(be.download(host.data(), x.p(), 256 * sizeof(float)), Error);
  EXPECT_TRUE(be.end_capture() == nullptr);
  be.relu2(Tensor::f32(x.p(), 1, 256));
  be.download(host.data(), x.p(), 256 * sizeof(float));
}

// Detached memory (alloc_detached): zeroed like alloc(); its release leaves the memory epoch, so a
// graph recorded before stays valid, also once a normal buffer takes the freed block (the graph never
// held it); an ordinary release still moves the epoch; asking for it while recording is an error.
TEST(CudaGraph, DetachedReleaseKeepsTheEpochAndTheGraph) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  const std::vector<float> xs = random_vec(256, 5, -2.f, 2.f);
  auto x = to_device(be, xs);
  constexpr size_t kN = 12345;  // a size of its own, so the pool's block for it is the detached one
  const std::vector<float> ones(kN, 1.f);
  auto detached = be.alloc_detached(kN * sizeof(float));
  be.upload(detached->data(), ones.data(), kN * sizeof(float));
  void* const first = detached->data();
  detached.reset();
  detached = be.alloc_detached(kN * sizeof(float));
  EXPECT_EQ(detached->data(), first);
  std::vector<float> zeros(kN, -1.f);
  be.download(zeros.data(), detached->data(), kN * sizeof(float));
  EXPECT_TRUE(same_bits(zeros, std::vector<float>(kN, 0.f))) << "a reused detached block was not zeroed";
  void* const freed = detached->data();

  const uint64_t e0 = be.memory_epoch();
  ASSERT_TRUE(be.begin_capture());
  be.relu2(Tensor::f32(x.p(), 1, 256));
  auto graph = be.end_capture();
  ASSERT_TRUE(graph != nullptr);
  EXPECT_EQ(be.memory_epoch(), e0);

  detached.reset();
  EXPECT_EQ(be.memory_epoch(), e0) << "releasing detached memory moved the epoch";
  auto reused = be.alloc(kN * sizeof(float));  // the pool hands the detached block out again
  EXPECT_EQ(reused->data(), freed);
  const std::vector<float> poison(kN, -7.25f);
  be.upload(reused->data(), poison.data(), kN * sizeof(float));
  graph->launch();
  graph->launch();
  std::vector<float> want = xs, got(256), untouched(kN);
  for (float& v : want) v = std::max(v, 0.f) * std::max(v, 0.f), v = v * v;  // relu² twice
  be.download(got.data(), x.p(), 256 * sizeof(float));
  be.download(untouched.data(), reused->data(), kN * sizeof(float));
  for (int i = 0; i < 256; ++i) ASSERT_NEAR(got[i], want[i], 1e-5f * (1.f + want[i])) << "element " << i;
  EXPECT_TRUE(same_bits(untouched, poison)) << "the replay wrote into the block it was not recorded with";

  reused.reset();
  EXPECT_NE(be.memory_epoch(), e0) << "an ordinary release must still move the epoch";

  ASSERT_TRUE(be.begin_capture());
  EXPECT_THROW(be.alloc_detached(64), Error);
  (void)be.end_capture();
  auto after = be.alloc_detached(64);  // usable again once the capture is closed
  EXPECT_TRUE(after != nullptr);
}

// K relu2 launches and C device copies recorded: the graph reports K kernel nodes and C copy nodes,
// and its replay computes what K relu2 steps on the host do.
TEST(CudaGraph, NodeCountsAreTheRecordedLaunches) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  constexpr int64_t kN = 1000;
  for (int kernels : {1, 3, 7}) {
    for (int copies : {0, 2}) {
      const std::vector<float> x0 = random_vec(size_t(kN), uint64_t(100 + kernels * 10 + copies), -1.5f, 1.5f);
      auto x = to_device(be, x0);
      auto dst = poisoned_device(be, size_t(kN));
      const Tensor tx = Tensor::f32(x.p(), 1, kN), td = Tensor::f32(dst.p(), 1, kN);
      be.synchronize();
      ASSERT_TRUE(be.begin_capture());
      for (int i = 0; i < kernels; ++i) be.relu2(tx);
      for (int i = 0; i < copies; ++i) be.copy(tx, td);
      auto graph = be.end_capture();
      ASSERT_TRUE(graph != nullptr);
      EXPECT_EQ(graph->kernel_nodes(), kernels) << kernels << " kernels, " << copies << " copies";
      EXPECT_EQ(graph->copy_nodes(), copies) << kernels << " kernels, " << copies << " copies";
      graph->launch();
      std::vector<float> want = x0;
      for (int i = 0; i < kernels; ++i)
        for (float& v : want) {
          const float r = v < 0.0f ? 0.0f : v;
          v = r * r;
        }
      EXPECT_TRUE(same_bits(to_host(be, x), want)) << kernels << " kernels";
      if (copies) EXPECT_TRUE(same_bits(to_host(be, dst), want)) << kernels << " kernels";
    }
  }
}

}  // namespace
}  // namespace tandem::test
