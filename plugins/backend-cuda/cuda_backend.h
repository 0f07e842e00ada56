// The CUDA backend: device memory from a caching allocator, copies, and the Backend ops as CUDA
// kernels (kernels_cuda.cuh). Sampling runs on the host with the CPU kernels.
// Owner: the registry creates one CudaBackend per request; buffers share the allocator's pool, which
// lives until the backend and its last buffer are gone. Thread: one driving thread (the engine
// thread). Sync: every op is queued on the stream (tandem/cuda/util.cuh) and returns at once; only
// download(), synchronize() and sample() of device logits wait. Graphs: begin_capture() records the
// stream (every CUDA module queues on it) until end_capture(); see tandem/backend.h.
#pragma once
#include <memory>
#include <string>

#include "tandem/backend.h"
#include "tandem/device_queue.h"

struct CUstream_st;  // cudaStream_t and cudaEvent_t, without the CUDA headers (plain C++ includes this)
struct CUevent_st;

namespace tandem::cuda {

class BlockPool;

class CudaBackend final : public Backend {
 public:
  CudaBackend();
  ~CudaBackend() override;

  std::string device() const override { return "cuda"; }

  // Blocks are cached on release and handed out again in stream order, so freeing a buffer that
  // queued kernels still read is safe: the next user's work is queued after them.
  std::unique_ptr<Buffer> alloc(size_t bytes) override;
  // From the same pool; its release does not move memory_epoch(). Throws while a capture is open.
  std::unique_ptr<Buffer> alloc_detached(size_t bytes) override;
  void upload(void* dst, const void* src_host, size_t bytes) override;
  void download(void* dst_host, const void* src, size_t bytes) override;
  void synchronize() override;

  void rms_norm(const Tensor& x, const float* w, float eps, const Tensor& y) override;
  void gated_rms_norm(const Tensor& y, const Tensor& z, const float* w, int groups, float eps,
                      const Tensor& out) override;
  void copy(const Tensor& src, const Tensor& dst) override;
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void add_rms_norm(const Tensor& x, const Tensor& b, const float* w, float eps, const Tensor& y) override;
  void relu2(const Tensor& x) override;
  // Passes of up to kAttentionSplitRows rows (attention and attention_at) use a workspace kept by the
  // backend, allocated at the first such pass of a shape (a recording that allocates it is dropped,
  // see begin_capture()).
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, float* k_cache, float* v_cache,
                 int64_t capacity, int64_t pos0, int nq, int nkv, int hd, const Tensor& out) override;
  // The new k/v rows are written by a kernel at *pos0_device and the attention kernel reads it too.
  void attention_at(const Tensor& q, const Tensor& k, const Tensor& v, float* k_cache, float* v_cache,
                    int64_t capacity, int64_t pos0, const int64_t* pos0_device, int nq, int nkv, int hd,
                    const Tensor& out) override;
  void rope(const Tensor& x, int heads, int hd, int64_t pos0, double theta) override;
  void attention_full(const Tensor& q, const Tensor& k, const Tensor& v, int64_t rows, int nq, int nkv, int hd,
                      const Tensor& out) override;
  // The rope and attention kernels read the position (and so the key rows) from *pos0_device; the new
  // k/v rows go into the caches by the kv_append kernel of attention_at.
  void rope_at(const Tensor& x, int heads, int hd, int64_t pos0, const int64_t* pos0_device, double theta) override;
  void rope_table(const Tensor& x, int heads, int hd, int64_t pos0, const int64_t* pos0_device, const float* inv_freq,
                  float scale) override;
  void attention_full_at(const Tensor& q, const Tensor& k, const Tensor& v, float* k_cache, float* v_cache,
                         int64_t capacity, int64_t pos0, const int64_t* pos0_device, int nq, int nkv, int hd,
                         const Tensor& out) override;
  void silu_mul(const Tensor& g, const Tensor& u, const Tensor& out) override;
  void scale_softcap(const Tensor& x, float s, float cap) override;
  // Two launches (per chunk of a row, then a merge per row) through a workspace kept by the backend,
  // grown like the attention workspace (sized for at least kTopKRows rows and kMaxTopK).
  void top_k_logprobs(const Tensor& logits, int k, int32_t* ids, float* logp) override;
  void mul_add_rows(const Tensor& x, const Tensor& a, const Tensor& b, int64_t group, const Tensor& out) override;
  void attention_bias(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, int heads, int hd,
                      const Tensor& out) override;
  void attention_bias_qkv(const Tensor& qkv, const Tensor& qkv_bias, const Tensor& bias, int heads, int hd,
                          const Tensor& out) override;
  void add_rows(const Tensor& x, const Tensor& d, const Tensor& a, int64_t ga, const Tensor& b, int64_t gb, bool silu,
                const Tensor& out) override;
  void normalize_rows(const Tensor& x, float eps) override;
  void group_dots(const Tensor& a, const Tensor& b, int64_t groups, float scale, const Tensor& out) override;
  void moe_route(const Tensor& logits, const float* bias, const RouteParams& p, int32_t* ids,
                 float* weights) override;
  void moe_combine(const Tensor& expert_out, const float* weights, int k, const Tensor& out) override;
  // Logits in host memory are sampled in place; device logits are downloaded first.
  int32_t sample(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng) override;

  // A 1 GiB device-to-device cudaMemcpy timed with events (median of 10): (read + written) / time.
  double measure_copy_bandwidth() override;
  // The most bytes the pool has held from cudaMalloc.
  size_t peak_memory_bytes() const override;

  // Bytes the pool holds from cudaMalloc (in use and cached), for tests and reports.
  size_t pool_bytes() const;

  // Stream capture in relaxed mode on this thread's stream. A buffer allocated or released while
  // recording makes end_capture() discard the recording (it would bake in a memset or a freed
  // address); the caller runs the work again without capture.
  bool begin_capture() override;
  // "TANDEM_CUDA_GRAPHS=0" when that is set (read at each call: Model::load asks once), else "".
  std::string graphs_off_reason() const override;
  std::unique_ptr<Graph> end_capture() override;
  // Buffers from alloc() released to the pool so far.
  uint64_t memory_epoch() const override;

  // Lanes are streams beside this thread's stream, joined by events (recorded into graphs like the
  // kernels). TANDEM_CUDA_LANES=0 keeps every op on the one stream. Blocks released while lanes are
  // open are handed out again only after the join.
  void fork(int lanes) override;
  void lane(int i) override;
  void wait_lane(int i) override;
  void join() override;

 private:
  void check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const float* k_cache,
                       const float* v_cache, int64_t capacity, int64_t pos0, int nq, int nkv, int hd,
                       const Tensor& out) const;
  // The split attention's partials for n rows of nq heads of hd (null when n needs none).
  void* attention_workspace(int64_t n, int64_t pos0, int nq, int nkv, int hd);
  static constexpr int64_t kTopKRows = 64;

  std::unique_ptr<Buffer> make_buffer(size_t bytes, bool detached);
  bool lanes_enabled() const;
  CUstream_st* lane_stream(int i) const;

  std::shared_ptr<BlockPool> pool_;
  CUstream_st* lane_streams_[kMaxLanes] = {};
  CUevent_st* lane_events_[kMaxLanes] = {};
  CUevent_st* fork_event_ = nullptr;
  int n_lanes_ = 1;
  bool lanes_open_ = false;
  std::unique_ptr<Buffer> attention_ws_;  // after pool_: released into it first
  std::unique_ptr<Buffer> prefill_ws_;    // the flash kernel's fp16 key tiles (prefill passes)
  std::unique_ptr<Buffer> top_k_ws_;      // likewise
  bool capturing_ = false;
  uint64_t capture_allocs_ = 0, capture_epoch_ = 0;
};

}  // namespace tandem::cuda
