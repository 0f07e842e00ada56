// CudaBackend: the caching block pool, copies, and the Backend ops validated on the host and queued
// as kernels (kernels_cuda.cuh) on the module stream.
#include "cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "kernels_cuda.cuh"
#include "tandem/cuda/util.cuh"
#include "tandem/op_checks.h"
#include "tandem/sampler.h"

namespace tandem::cuda {

// Device blocks from cudaMalloc, kept after release and reused. All work runs on one stream, so a
// block handed out again is only touched by work queued after everything that used it before.
class BlockPool {
 public:
  ~BlockPool() {
    // Process exit may have torn the runtime down already; nothing useful can be done on error.
    for (auto& [size, p] : free_) (void)cudaFree(p);
  }

  void* get(size_t bytes, size_t& got) {
    const size_t r = round(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    ++handed_out_;
    auto it = free_.lower_bound(r);
    if (it != free_.end() && it->first < 2 * r) {
      got = it->first;
      void* p = it->second;
      free_.erase(it);
      return p;
    }
    void* p = nullptr;
    if (cudaMalloc(&p, r) != cudaSuccess) {
      (void)cudaGetLastError();
      release_cached();  // cudaFree waits for the device, then the cache is retried as fresh memory
      if (cudaMalloc(&p, r) != cudaSuccess) {
        (void)cudaGetLastError();
        fail("cuda: cannot allocate ", bytes, " bytes of device memory (", held_, " bytes held by this backend)");
      }
    }
    held_ += r;
    peak_ = std::max(peak_, held_);
    got = r;
    return p;
  }

  // A detached block (CudaBackend::alloc_detached) leaves released_: no live recording holds it.
  void put(void* p, size_t size, bool detached) {
    std::lock_guard<std::mutex> lock(mu_);
    if (deferring_) {
      pending_.emplace_back(size, p);
    } else {
      free_.emplace(size, p);
    }
    if (!detached) ++released_;
  }
  // While lanes are open, a released block may still be read by another lane's queued work: it is
  // handed out again only after the join, which orders that work before everything that follows.
  void defer(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    deferring_ = on;
    if (on) return;
    for (auto& [size, p] : pending_) free_.emplace(size, p);
    pending_.clear();
  }

  uint64_t released() const {
    std::lock_guard<std::mutex> lock(mu_);
    return released_;
  }
  uint64_t handed_out() const {
    std::lock_guard<std::mutex> lock(mu_);
    return handed_out_;
  }

  size_t held() const {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }
  size_t peak() const {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }

 private:
  // Small blocks in 512-byte steps; large ones in 2 MiB steps, so that scratch regrown by a few
  // rows reuses its old block.
  static size_t round(size_t b) {
    const size_t step = b < (size_t(1) << 20) ? 512 : (size_t(2) << 20);
    return std::max(step, (b + step - 1) / step * step);
  }
  void release_cached() {
    for (auto& [size, p] : free_) {
      (void)cudaFree(p);
      held_ -= size;
    }
    free_.clear();
  }

  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;
  std::vector<std::pair<size_t, void*>> pending_;
  bool deferring_ = false;
  size_t held_ = 0, peak_ = 0;
  // Graph bookkeeping: buffers from alloc() returned so far / blocks handed out so far (every kind).
  uint64_t released_ = 0, handed_out_ = 0;
};

namespace {

class DeviceBuffer final : public Buffer {
 public:
  DeviceBuffer(std::shared_ptr<BlockPool> pool, size_t bytes, bool detached = false)
      : pool_(std::move(pool)), bytes_(bytes), detached_(detached) {
    data_ = pool_->get(bytes, block_);
  }
  ~DeviceBuffer() override { pool_->put(data_, block_, detached_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  std::shared_ptr<BlockPool> pool_;
  void* data_ = nullptr;
  size_t bytes_ = 0, block_ = 0;
  bool detached_ = false;
};

// Adds the kernel and copy (memcpy, memset) nodes of a recording, child graphs included; false when
// the runtime cannot list them (then the counts are unknown; the graph itself is fine).
bool count_nodes(cudaGraph_t graph, int64_t& kernels, int64_t& copies) {
  size_t n = 0;
  if (cudaGraphGetNodes(graph, nullptr, &n) != cudaSuccess) return false;
  std::vector<cudaGraphNode_t> nodes(n);
  if (n && cudaGraphGetNodes(graph, nodes.data(), &n) != cudaSuccess) return false;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    if (cudaGraphNodeGetType(node, &type) != cudaSuccess) return false;
    if (type == cudaGraphNodeTypeKernel) ++kernels;
    else if (type == cudaGraphNodeTypeMemcpy || type == cudaGraphNodeTypeMemset) ++copies;
    else if (type == cudaGraphNodeTypeGraph) {
      cudaGraph_t child = nullptr;
      if (cudaGraphChildGraphNodeGetGraph(node, &child) != cudaSuccess || !count_nodes(child, kernels, copies))
        return false;
    }
  }
  return true;
}

class CudaGraph final : public Graph {
 public:
  CudaGraph(cudaGraphExec_t exec, int64_t kernels, int64_t copies) : exec_(exec), kernels_(kernels), copies_(copies) {}
  ~CudaGraph() override { (void)cudaGraphExecDestroy(exec_); }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  void launch() override { check_cuda(cudaGraphLaunch(exec_, stream()), "cudaGraphLaunch"); }
  int64_t kernel_nodes() const override { return kernels_; }
  int64_t copy_nodes() const override { return copies_; }

 private:
  cudaGraphExec_t exec_;
  int64_t kernels_, copies_;
};

void check_copy(const char* op, const void* dst, const void* src, size_t bytes) {
  check(bytes == 0 || (dst && src), "cuda: ", op, " of ", bytes, " bytes with a null ", dst ? "source" : "destination");
}

}  // namespace

CudaBackend::CudaBackend() : pool_(std::make_shared<BlockPool>()) {
  check(device_count() > 0, "cuda: no CUDA device is visible to this process");
  check_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
  prepare_attention();
}

CudaBackend::~CudaBackend() {
  if (lanes_open_) current_device_queue() = DeviceQueue{};
  for (int i = 0; i < kMaxLanes; ++i) {
    if (lane_streams_[i]) (void)cudaStreamDestroy(lane_streams_[i]);
    if (lane_events_[i]) (void)cudaEventDestroy(lane_events_[i]);
  }
  if (fork_event_) (void)cudaEventDestroy(fork_event_);
}

bool CudaBackend::lanes_enabled() const {
  static const bool on = [] {
    const char* env = std::getenv("TANDEM_CUDA_LANES");
    return !(env && std::string(env) == "0");
  }();
  return on;
}

cudaStream_t CudaBackend::lane_stream(int i) const { return i == 0 ? cudaStreamPerThread : lane_streams_[i]; }

void CudaBackend::fork(int lanes) {
  check(!lanes_open_, "cuda: fork while lanes are open (join first)");
  check(lanes >= 1 && lanes <= kMaxLanes, "cuda: fork of ", lanes, " lanes, expected 1 to ", kMaxLanes);
  if (!lanes_enabled() || lanes == 1) return;
  if (!fork_event_) check_cuda(cudaEventCreateWithFlags(&fork_event_, cudaEventDisableTiming), "fork: event");
  check_cuda(cudaEventRecord(fork_event_, cudaStreamPerThread), "fork: record");
  for (int i = 1; i < lanes; ++i) {
    if (!lane_streams_[i])
      check_cuda(cudaStreamCreateWithFlags(&lane_streams_[i], cudaStreamNonBlocking), "fork: create a lane stream");
    check_cuda(cudaStreamWaitEvent(lane_streams_[i], fork_event_, 0), "fork: lane waits");
  }
  for (int i = 0; i < lanes; ++i)
    if (!lane_events_[i]) check_cuda(cudaEventCreateWithFlags(&lane_events_[i], cudaEventDisableTiming), "fork: event");
  n_lanes_ = lanes;
  lanes_open_ = true;
  pool_->defer(true);
}

void CudaBackend::lane(int i) {
  if (!lanes_open_) return;  // lanes off (or one lane): everything stays in order on the stream
  check(i >= 0 && i < n_lanes_, "cuda: lane ", i, " of ", n_lanes_, " open lanes");
  current_device_queue() = DeviceQueue{i == 0 ? nullptr : static_cast<void*>(lane_streams_[i]), i};
}

void CudaBackend::wait_lane(int i) {
  if (!lanes_open_) return;
  check(i >= 0 && i < n_lanes_, "cuda: wait for lane ", i, " of ", n_lanes_, " open lanes");
  const int at = current_device_queue().lane;
  if (i == at) return;
  check_cuda(cudaEventRecord(lane_events_[i], lane_stream(i)), "wait_lane: record");
  check_cuda(cudaStreamWaitEvent(lane_stream(at), lane_events_[i], 0), "wait_lane: wait");
}

void CudaBackend::join() {
  if (!lanes_open_) return;
  for (int i = 1; i < n_lanes_; ++i) {
    check_cuda(cudaEventRecord(lane_events_[i], lane_streams_[i]), "join: record");
    check_cuda(cudaStreamWaitEvent(cudaStreamPerThread, lane_events_[i], 0), "join: wait");
  }
  current_device_queue() = DeviceQueue{};
  lanes_open_ = false;
  n_lanes_ = 1;
  pool_->defer(false);
}

std::unique_ptr<Buffer> CudaBackend::alloc(size_t bytes) { return make_buffer(bytes, false); }

std::unique_ptr<Buffer> CudaBackend::alloc_detached(size_t bytes) {
  check(!capturing_, "cuda: alloc_detached of ", bytes, " bytes while a graph capture is open (detached memory "
        "must exist before any recording that uses it)");
  return make_buffer(bytes, true);
}

std::unique_ptr<Buffer> CudaBackend::make_buffer(size_t bytes, bool detached) {
  auto b = std::make_unique<DeviceBuffer>(pool_, bytes, detached);
  // Zeroed, as the CPU backend's buffers are: a fresh state or cache reads as zeros on every device.
  if (bytes) check_cuda(cudaMemsetAsync(b->data(), 0, bytes, stream()), "alloc: cudaMemsetAsync");
  return b;
}

void CudaBackend::upload(void* dst, const void* src_host, size_t bytes) {
  check_copy("upload", dst, src_host, bytes);
  // From pageable memory the copy is staged before the call returns, so the source may be reused.
  if (bytes) check_cuda(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyDefault, stream()), "upload");
}

void CudaBackend::download(void* dst_host, const void* src, size_t bytes) {
  check_copy("download", dst_host, src, bytes);
  if (!bytes) return;
  check_cuda(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDefault, stream()), "download");
  check_cuda(cudaStreamSynchronize(stream()), "download: synchronize");
}

void CudaBackend::synchronize() {
  check(!lanes_open_, "cuda: synchronize while lanes are open");
  check_cuda(cudaStreamSynchronize(stream()), "synchronize");
}

size_t CudaBackend::pool_bytes() const { return pool_->held(); }

uint64_t CudaBackend::memory_epoch() const { return pool_->released(); }

std::string CudaBackend::graphs_off_reason() const {
  const char* env = std::getenv("TANDEM_CUDA_GRAPHS");
  return env && std::string(env) == "0" ? "TANDEM_CUDA_GRAPHS=0" : "";
}

bool CudaBackend::begin_capture() {
  check(!capturing_, "cuda: begin_capture while a capture is open");
  // Relaxed: an allocation during the capture must not fail (it is detected and the recording
  // dropped instead); a synchronizing call on the stream still fails and invalidates the capture.
  if (cudaStreamBeginCapture(stream(), cudaStreamCaptureModeRelaxed) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  capturing_ = true;
  capture_allocs_ = pool_->handed_out();
  capture_epoch_ = pool_->released();
  return true;
}

std::unique_ptr<Graph> CudaBackend::end_capture() {
  check(capturing_, "cuda: end_capture without begin_capture");
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream(), &graph);
  if (ended != cudaSuccess || !graph) {
    (void)cudaGetLastError();  // an invalidated capture is reported here; nothing ran
    if (graph) (void)cudaGraphDestroy(graph);
    return nullptr;
  }
  const bool clean = pool_->handed_out() == capture_allocs_ && pool_->released() == capture_epoch_;
  cudaGraphExec_t exec = nullptr;
  cudaError_t made = cudaSuccess;
  int64_t kernels = 0, copies = 0;  // counted here: an instantiated graph cannot be walked
  if (clean) made = cudaGraphInstantiate(&exec, graph, 0);
  if (clean && made == cudaSuccess && !count_nodes(graph, kernels, copies)) {
    (void)cudaGetLastError();
    kernels = copies = -1;
  }
  (void)cudaGraphDestroy(graph);
  if (!clean) return nullptr;
  check_cuda(made, "cudaGraphInstantiate");
  return std::make_unique<CudaGraph>(exec, kernels, copies);
}

size_t CudaBackend::peak_memory_bytes() const { return pool_->peak(); }

double CudaBackend::measure_copy_bandwidth() {
  // Outside the pool (its peak stays the model's); 1 GiB each way is far past the 60 MB L2.
  constexpr size_t kBytes = size_t(1) << 30;
  void *src = nullptr, *dst = nullptr;
  if (cudaMalloc(&src, kBytes) != cudaSuccess || cudaMalloc(&dst, kBytes) != cudaSuccess) {
    (void)cudaGetLastError();
    if (src) (void)cudaFree(src);
    return 0.0;  // no room beside the model: not measured
  }
  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "measure_copy_bandwidth: cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), "measure_copy_bandwidth: cudaEventCreate");
  check_cuda(cudaMemsetAsync(src, 0x5a, kBytes, stream()), "measure_copy_bandwidth: cudaMemsetAsync");
  std::vector<float> ms;
  for (int r = 0; r < 12; ++r) {
    check_cuda(cudaEventRecord(start, stream()), "measure_copy_bandwidth: cudaEventRecord");
    check_cuda(cudaMemcpyAsync(dst, src, kBytes, cudaMemcpyDeviceToDevice, stream()), "measure_copy_bandwidth: copy");
    check_cuda(cudaEventRecord(stop, stream()), "measure_copy_bandwidth: cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), "measure_copy_bandwidth: cudaEventSynchronize");
    float t = 0;
    check_cuda(cudaEventElapsedTime(&t, start, stop), "measure_copy_bandwidth: cudaEventElapsedTime");
    if (r >= 2) ms.push_back(t);  // two warm-up copies
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  (void)cudaFree(src);
  (void)cudaFree(dst);
  std::sort(ms.begin(), ms.end());
  return 2.0 * double(kBytes) / (double(ms[ms.size() / 2]) * 1e-3);
}

void CudaBackend::rms_norm(const Tensor& x, const float* w, float eps, const Tensor& y) {
  check_tensor("rms_norm", "x", x, x.rows, x.cols);
  check_tensor("rms_norm", "y", y, x.rows, x.cols);
  check_ptr("rms_norm", "weight", w);
  launch_rms_norm(x.f32(), w, eps, x.rows, x.cols, y.f32(), stream());
}

void CudaBackend::gated_rms_norm(const Tensor& y, const Tensor& z, const float* w, int groups, float eps,
                                 const Tensor& out) {
  check_tensor("gated_rms_norm", "y", y, y.rows, y.cols);
  check_tensor("gated_rms_norm", "z", z, y.rows, y.cols);
  check_tensor("gated_rms_norm", "out", out, y.rows, y.cols);
  check_ptr("gated_rms_norm", "weight", w);
  if (groups <= 0 || y.cols % groups != 0)
    fail("gated_rms_norm: groups must divide the width ", y.cols, ", found ", groups);
  launch_gated_rms_norm(y.f32(), z.f32(), w, groups, eps, y.rows, y.cols, out.f32(), stream());
}

void CudaBackend::add_rms_norm(const Tensor& x, const Tensor& b, const float* w, float eps, const Tensor& y) {
  check_tensor("add_rms_norm", "x", x, x.rows, x.cols);
  check_tensor("add_rms_norm", "b", b, x.rows, x.cols);
  check_tensor("add_rms_norm", "y", y, x.rows, x.cols);
  check_ptr("add_rms_norm", "weight", w);
  if (y.data == x.data || y.data == b.data) fail("add_rms_norm: y must not alias x or b");
  launch_add_rms_norm(x.f32(), b.f32(), w, eps, x.rows, x.cols, y.f32(), stream());
}

void CudaBackend::copy(const Tensor& src, const Tensor& dst) {
  check(src.dtype == dst.dtype && src.nbytes() == dst.nbytes(), "cuda: copy of ", src.rows, "×", src.cols, " ",
        dtype_name(src.dtype), " into ", dst.rows, "×", dst.cols, " ", dtype_name(dst.dtype));
  check_copy("copy", dst.data, src.data, src.nbytes());
  if (src.nbytes() && src.data != dst.data)
    check_cuda(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToDevice, stream()), "copy");
}

void CudaBackend::add(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_tensor("add", "a", a, a.rows, a.cols);
  check_tensor("add", "b", b, a.rows, a.cols);
  check_tensor("add", "out", out, a.rows, a.cols);
  launch_add(a.f32(), b.f32(), a.numel(), out.f32(), stream());
}

void CudaBackend::relu2(const Tensor& x) {
  check_tensor("relu2", "x", x, x.rows, x.cols);
  launch_relu2(x.f32(), x.numel(), stream());
}

void CudaBackend::rope(const Tensor& x, int heads, int hd, int64_t pos0, double theta) {
  check_rope("rope", x, heads, hd, pos0);
  launch_rope(x.f32(), x.rows, heads, hd, pos0, theta, stream());
}

void CudaBackend::attention_full(const Tensor& q, const Tensor& k, const Tensor& v, int64_t rows, int nq, int nkv,
                                 int hd, const Tensor& out) {
  if (nq <= 0 || nkv <= 0 || hd <= 0 || nq % nkv != 0 || hd > kMaxHeadDim)
    fail("attention_full: heads must be positive, nq a multiple of nkv and hd ≤ ", kMaxHeadDim, ", found nq=", nq,
         " nkv=", nkv, " hd=", hd);
  const int64_t n = q.rows, qw = int64_t(nq) * hd, kw = int64_t(nkv) * hd;
  check_tensor("attention_full", "q", q, n, qw);
  check_tensor("attention_full", "out", out, n, qw);
  if (rows <= 0 || k.rows < rows || v.rows < rows)
    fail("attention_full: ", rows, " key rows asked, k holds ", k.rows, " and v ", v.rows);
  check_tensor("attention_full", "k", k, k.rows, kw);
  check_tensor("attention_full", "v", v, v.rows, kw);
  if (n > 65535) fail("attention_full: ", n, " query rows, at most 65535");
  launch_attention_full(q.f32(), k.f32(), v.f32(), n, rows, nq, nkv, hd, out.f32(), stream());
}

void CudaBackend::rope_at(const Tensor& x, int heads, int hd, int64_t pos0, const int64_t* pos0_device,
                          double theta) {
  check_rope("rope_at", x, heads, hd, pos0);
  check_ptr("rope_at", "pos0_device", pos0_device);
  launch_rope(x.f32(), x.rows, heads, hd, pos0, theta, stream(), pos0_device);
}

void CudaBackend::rope_table(const Tensor& x, int heads, int hd, int64_t pos0, const int64_t* pos0_device,
                             const float* inv_freq, float scale) {
  check_rope("rope_table", x, heads, hd, pos0);
  check_ptr("rope_table", "inv_freq", inv_freq);
  launch_rope_table(x.f32(), x.rows, heads, hd, pos0, pos0_device, inv_freq, scale, stream());
}

void CudaBackend::attention_full_at(const Tensor& q, const Tensor& k, const Tensor& v, float* k_cache, float* v_cache,
                                    int64_t capacity, int64_t pos0, const int64_t* pos0_device, int nq, int nkv,
                                    int hd, const Tensor& out) {
  if (nq <= 0 || nkv <= 0 || hd <= 0 || nq % nkv != 0 || hd > kMaxHeadDim)
    fail("attention_full_at: heads must be positive, nq a multiple of nkv and hd ≤ ", kMaxHeadDim, ", found nq=", nq,
         " nkv=", nkv, " hd=", hd);
  const int64_t n = q.rows, qw = int64_t(nq) * hd, kw = int64_t(nkv) * hd;
  check_tensor("attention_full_at", "q", q, n, qw);
  check_tensor("attention_full_at", "k", k, n, kw);
  check_tensor("attention_full_at", "v", v, n, kw);
  check_tensor("attention_full_at", "out", out, n, qw);
  if (n <= 0 || n > 65535) fail("attention_full_at: ", n, " query rows, expected 1 … 65535");
  if (pos0 < 0 || pos0 + n > capacity)
    fail("attention_full_at: positions [", pos0, ", ", pos0 + n, ") exceed the cache capacity ", capacity);
  check_ptr("attention_full_at", "k_cache", k_cache);
  check_ptr("attention_full_at", "v_cache", v_cache);
  check_ptr("attention_full_at", "pos0_device", pos0_device);
  launch_kv_append(k.f32(), v.f32(), n, kw, pos0_device, k_cache, v_cache, stream());
  launch_attention_full(q.f32(), k_cache, v_cache, n, pos0 + n, nq, nkv, hd, out.f32(), stream(), pos0_device);
}

void CudaBackend::silu_mul(const Tensor& g, const Tensor& u, const Tensor& out) {
  check_tensor("silu_mul", "g", g, g.rows, g.cols);
  check_tensor("silu_mul", "u", u, g.rows, g.cols);
  check_tensor("silu_mul", "out", out, g.rows, g.cols);
  launch_silu_mul(g.f32(), u.f32(), g.numel(), out.f32(), stream());
}

void CudaBackend::scale_softcap(const Tensor& x, float s, float cap) {
  check_tensor("scale_softcap", "x", x, x.rows, x.cols);
  launch_scale_softcap(x.f32(), x.numel(), s, cap, stream());
}

void CudaBackend::top_k_logprobs(const Tensor& logits, int k, int32_t* ids, float* logp) {
  check_tensor("top_k_logprobs", "logits", logits, logits.rows, logits.cols);
  if (k < 1 || k > kMaxTopK || k > logits.cols)
    fail("top_k_logprobs: k must be in [1, ", std::min<int64_t>(kMaxTopK, logits.cols), "], found ", k);
  check_ptr("top_k_logprobs", "ids", ids);
  check_ptr("top_k_logprobs", "logp", logp);
  if (logits.rows > 65535 || logits.cols > kTopKMaxVocab)
    fail("top_k_logprobs: ", logits.rows, " rows of ", logits.cols, ", at most 65535 rows of ", kTopKMaxVocab);
  if (logits.rows == 0) return;
  // Sized for kTopKRows rows at kMaxTopK at once, so the drafters' calls share one block and recordings
  // keep its address; growing releases the old block (the memory epoch moves), as attention_workspace.
  const size_t need = top_k_workspace_bytes(std::max(logits.rows, kTopKRows), logits.cols, kMaxTopK);
  if (!top_k_ws_ || top_k_ws_->bytes() < need) {
    top_k_ws_.reset();
    top_k_ws_ = std::make_unique<DeviceBuffer>(pool_, need);
  }
  launch_top_k_logprobs(logits.f32(), logits.rows, logits.cols, k, ids, logp, top_k_ws_->data(), top_k_ws_->bytes(),
                        stream());
}

void CudaBackend::mul_add_rows(const Tensor& x, const Tensor& a, const Tensor& b, int64_t group, const Tensor& out) {
  check_mul_add_rows(x, a, b, group, out);
  launch_mul_add_rows(x.f32(), a.data ? a.f32() : nullptr, b.data ? b.f32() : nullptr, x.rows, x.cols, group,
                      out.f32(), stream());
}

void CudaBackend::attention_bias(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, int heads,
                                 int hd, const Tensor& out) {
  check_attention_bias(q, k, v, bias, heads, hd, out);
  if (hd > kMaxHeadDim || q.rows > 65535 || heads > 65535)
    fail("attention_bias: ", q.rows, " rows of ", heads, " heads of ", hd, ", at most 65535 rows and heads and hd ≤ ",
         kMaxHeadDim);
  launch_attention_bias(q.f32(), k.f32(), v.f32(), bias.f32(), q.rows, heads, hd, out.f32(), stream());
}

void CudaBackend::attention_bias_qkv(const Tensor& qkv, const Tensor& qkv_bias, const Tensor& bias, int heads, int hd,
                                     const Tensor& out) {
  check_attention_bias_qkv(qkv, qkv_bias, bias, heads, hd, out);
  if (hd > kMaxHeadDim || qkv.rows > 65535 || heads > 65535)
    fail("attention_bias_qkv: ", qkv.rows, " rows of ", heads, " heads of ", hd,
         ", at most 65535 rows and heads and hd ≤ ", kMaxHeadDim);
  launch_attention_bias_qkv(qkv.f32(), qkv_bias.data ? qkv_bias.f32() : nullptr, bias.f32(), qkv.rows, heads, hd,
                            out.f32(), stream());
}

void CudaBackend::add_rows(const Tensor& x, const Tensor& d, const Tensor& a, int64_t ga, const Tensor& b, int64_t gb,
                           bool silu, const Tensor& out) {
  check_add_rows(x, d, a, ga, b, gb, out);
  launch_add_rows(x.f32(), d.data ? d.f32() : nullptr, a.data ? a.f32() : nullptr, ga, b.data ? b.f32() : nullptr, gb,
                  silu, x.rows, x.cols, out.f32(), stream());
}

void CudaBackend::normalize_rows(const Tensor& x, float eps) {
  check_tensor("normalize_rows", "x", x, x.rows, x.cols);
  if (x.rows > INT32_MAX) fail("normalize_rows: ", x.rows, " rows, at most ", INT32_MAX);
  launch_normalize_rows(x.f32(), x.rows, x.cols, eps, stream());
}

void CudaBackend::group_dots(const Tensor& a, const Tensor& b, int64_t groups, float scale, const Tensor& out) {
  check_group_dots(a, b, groups, out);
  launch_group_dots(a.f32(), b.f32(), groups, a.rows / groups, b.rows / groups, a.cols, scale, out.f32(), stream());
}

void CudaBackend::check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const float* k_cache,
                                  const float* v_cache, int64_t capacity, int64_t pos0, int nq, int nkv, int hd,
                                  const Tensor& out) const {
  if (nq <= 0 || nkv <= 0 || hd <= 0)
    fail("attention: heads and head_dim must be positive, found nq=", nq, " nkv=", nkv, " hd=", hd);
  if (nq % nkv != 0) fail("attention: query heads ", nq, " are not a multiple of kv heads ", nkv);
  const int64_t n = q.rows, qw = int64_t(nq) * hd, kw = int64_t(nkv) * hd;
  check_tensor("attention", "q", q, n, qw);
  check_tensor("attention", "k", k, n, kw);
  check_tensor("attention", "v", v, n, kw);
  check_tensor("attention", "out", out, n, qw);
  if (pos0 < 0 || pos0 + n > capacity)
    fail("attention: positions [", pos0, ", ", pos0 + n, ") exceed the cache capacity ", capacity);
  check_ptr("attention", "k_cache", k_cache);
  check_ptr("attention", "v_cache", v_cache);
}

void CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, float* k_cache, float* v_cache,
                            int64_t capacity, int64_t pos0, int nq, int nkv, int hd, const Tensor& out) {
  check_attention(q, k, v, k_cache, v_cache, capacity, pos0, nq, nkv, hd, out);
  const int64_t n = q.rows, kw = int64_t(nkv) * hd;
  if (n == 0) return;
  // The new rows first (stream order puts them before the kernel); the caller may have projected
  // k/v straight into the cache rows, then there is nothing to copy.
  const size_t bytes = size_t(n * kw) * sizeof(float);
  float* kdst = k_cache + pos0 * kw;
  float* vdst = v_cache + pos0 * kw;
  if (k.f32() != kdst) check_cuda(cudaMemcpyAsync(kdst, k.f32(), bytes, cudaMemcpyDeviceToDevice, stream()), "attention: k to cache");
  if (v.f32() != vdst) check_cuda(cudaMemcpyAsync(vdst, v.f32(), bytes, cudaMemcpyDeviceToDevice, stream()), "attention: v to cache");
  launch_attention(q.f32(), k_cache, v_cache, n, pos0, nq, nkv, hd, out.f32(),
                   attention_workspace(n, pos0, nq, nkv, hd), attention_workspace_bytes(n, pos0, nq, nkv, hd), stream());
}

void CudaBackend::attention_at(const Tensor& q, const Tensor& k, const Tensor& v, float* k_cache, float* v_cache,
                               int64_t capacity, int64_t pos0, const int64_t* pos0_device, int nq, int nkv, int hd,
                               const Tensor& out) {
  check_attention(q, k, v, k_cache, v_cache, capacity, pos0, nq, nkv, hd, out);
  check_ptr("attention", "pos0_device", pos0_device);
  const int64_t n = q.rows, kw = int64_t(nkv) * hd;
  if (n == 0) return;
  launch_kv_append(k.f32(), v.f32(), n, kw, pos0_device, k_cache, v_cache, stream());
  launch_attention(q.f32(), k_cache, v_cache, n, pos0, nq, nkv, hd, out.f32(),
                   attention_workspace(n, pos0, nq, nkv, hd), attention_workspace_bytes(n, pos0, nq, nkv, hd), stream(),
                   pos0_device);
}

void* CudaBackend::attention_workspace(int64_t n, int64_t pos0, int nq, int nkv, int hd) {
  if (n > kAttentionSplitRows) {
    // A prefill pass converts its keys into this block (the flash kernel's fp16 tiles). Passes this
    // long are never recorded; the block grows to the next power of two of keys (at least 8192), so
    // a long prompt read in chunks moves the memory epoch a few times, not once per chunk.
    const size_t need = attention_workspace_bytes(n, pos0, nq, nkv, hd);
    if (need == 0) return nullptr;
    if (!prefill_ws_ || prefill_ws_->bytes() < need) {
      int64_t keys = 8192;
      while (keys < pos0 + n) keys *= 2;
      prefill_ws_.reset();
      prefill_ws_ = std::make_unique<DeviceBuffer>(pool_, attention_workspace_bytes(n, keys - n, nq, nkv, hd));
    }
    return prefill_ws_->data();
  }
  // Sized for the longest split pass of this shape at once, so decode and verify passes of any
  // length share one block and recorded passes keep its address. Growing releases the old block,
  // which moves the memory epoch (recordings holding it are dropped), and a growth while recording
  // makes end_capture() drop that recording.
  const size_t need = attention_workspace_bytes(kAttentionSplitRows, 0, nq, nkv, hd);
  if (!attention_ws_ || attention_ws_->bytes() < need) {
    attention_ws_.reset();
    attention_ws_ = std::make_unique<DeviceBuffer>(pool_, need);
  }
  return attention_ws_->data();
}

void CudaBackend::moe_route(const Tensor& logits, const float* bias, const RouteParams& p, int32_t* ids,
                            float* weights) {
  if (p.n_experts <= 0) fail("moe_route: n_experts must be positive, found ", p.n_experts);
  check_tensor("moe_route", "logits", logits, logits.rows, p.n_experts);
  if (p.n_group <= 0 || p.n_experts % p.n_group != 0)
    fail("moe_route: n_group must divide n_experts ", p.n_experts, ", found ", p.n_group);
  if (p.topk_group < 1 || p.topk_group > p.n_group)
    fail("moe_route: topk_group must be in [1, ", p.n_group, "], found ", p.topk_group);
  const int64_t eligible = int64_t(p.topk_group) * (p.n_experts / p.n_group);
  if (p.top_k < 1 || p.top_k > eligible)
    fail("moe_route: top_k must be in [1, ", eligible, "] (experts in the kept groups), found ", p.top_k);
  if (!std::isfinite(p.scaling)) fail("moe_route: scaling must be finite, found ", p.scaling);
  if (logits.rows == 0) return;
  check_ptr("moe_route", "ids", ids);
  check_ptr("moe_route", "weights", weights);
  launch_moe_route(logits.f32(), bias, p, logits.rows, ids, weights, stream());
}

void CudaBackend::moe_combine(const Tensor& expert_out, const float* weights, int k, const Tensor& out) {
  if (k < 1) fail("moe_combine: k must be positive, found ", k);
  check_tensor("moe_combine", "out", out, out.rows, out.cols);
  check_tensor("moe_combine", "expert_out", expert_out, out.rows * k, out.cols);
  if (out.rows == 0) return;
  check_ptr("moe_combine", "weights", weights);
  launch_moe_combine(expert_out.f32(), weights, k, out.rows, out.cols, out.f32(), stream());
}

int32_t CudaBackend::sample(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng) {
  check_ptr("sample", "logits", logits);
  cudaPointerAttributes attr{};
  check_cuda(cudaPointerGetAttributes(&attr, logits), "sample: cudaPointerGetAttributes");
  if (attr.type != cudaMemoryTypeDevice) return sample_host(logits, vocab, p, rng);
  if (vocab <= 0 || vocab > INT32_MAX) fail("sample: vocab must be in [1, 2^31), found ", vocab);
  std::vector<float> host(static_cast<size_t>(vocab));
  download(host.data(), logits, host.size() * sizeof(float));
  return sample_host(host.data(), vocab, p, rng);
}

}  // namespace tandem::cuda
