// A device backend: memory, copies and the core ops of the Nemotron-H forward pass.
// Owner: the registry creates one Backend per device; the Model borrows it. Tensors passed to ops
// live in memory this backend allocated (or host memory for the CPU backend).
// Thread: one thread drives a backend at a time (the engine thread). Sync: ops are queued in stream
// order and return without synchronizing; only download() and synchronize() wait.
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "tandem/tensor.h"

namespace tandem {

// MoE routing parameters of one layer (spec/nemotron_h.md § 5).
struct RouteParams {
  int n_experts = 0;       // E
  int top_k = 0;           // k
  int n_group = 1;         // group-limited routing: groups of E/n_group experts
  int topk_group = 1;      // groups kept
  bool norm_topk_prob = true;
  float scaling = 1.0f;    // routed_scaling_factor
};

// Sampling parameters. temperature 0 = greedy (argmax, lowest id on ties).
struct SamplingParams {
  float temperature = 0.0f;
  int top_k = 0;           // 0 = off
  float top_p = 1.0f;      // 1 = off
  float min_p = 0.0f;      // 0 = off
  uint64_t seed = 0;
};

// A small deterministic generator (splitmix64) so that one seed gives one text on every backend.
struct Rng {
  uint64_t state = 0;
  explicit Rng(uint64_t seed = 0) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
};

// Work recorded by Backend::begin_capture()/end_capture() (a CUDA graph), queued again as a whole by
// launch(). It reads and writes the same device addresses every time, with the kernel arguments of
// the capture; whatever varies between launches must live in device memory.
class Graph {
 public:
  virtual ~Graph() = default;
  // Queues the recorded work on the backend's stream; does not synchronize.
  virtual void launch() = 0;
  // Optional (benchmarks): what one launch() runs, as nodes of the recording: kernels, and copies
  // (memcpy and memset nodes). -1 = the backend does not count them (the default).
  virtual int64_t kernel_nodes() const { return -1; }
  virtual int64_t copy_nodes() const { return -1; }
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string device() const = 0;  // "cpu", "cuda"
  // Whether this backend's buffers are host memory that plain C++ may read and write (then code
  // without kernels of its own, e.g. per-expert weight sets, can run on it). Default: no.
  virtual bool is_host() const { return false; }
  // Worker threads for host-side work; 0 = the machine's cores.
  virtual void set_threads(int n) { (void)n; }

  virtual std::unique_ptr<Buffer> alloc(size_t bytes) = 0;
  // Optional: memory that no recorded graph references (prefix checkpoints, a drafter's caches and
  // scratch). Ask for it outside any capture, and use it only in work queued outside capture, or in
  // graphs of its owner that are never launched after its release (a LiLiCorr drafter's recorded
  // proposal, dropped when its caches are regrown and destroyed before them); its release then leaves
  // memory_epoch() where it was, so the Model keeps its recorded graphs.
  // Default: alloc() (whose release moves the epoch, which is always correct).
  virtual std::unique_ptr<Buffer> alloc_detached(size_t bytes) { return alloc(bytes); }
  virtual void upload(void* dst, const void* src_host, size_t bytes) = 0;
  virtual void download(void* dst_host, const void* src, size_t bytes) = 0;
  virtual void synchronize() {}

  // y = w ⊙ (x · rsqrt(mean(x²) + eps)) per row; x, y [n, D] f32 (may alias); w [D].
  virtual void rms_norm(const Tensor& x, const float* w, float eps, const Tensor& y) = 0;
  // Mamba2 gated norm: u = y ⊙ silu(z); each row split into `groups` contiguous groups, each
  // RMS-normalized on its own; out = w ⊙ u. y, z, out [n, D]; w [D].
  virtual void gated_rms_norm(const Tensor& y, const Tensor& z, const float* w, int groups, float eps,
                              const Tensor& out) = 0;
  // out = a + b, elementwise (out may alias a or b).
  virtual void add(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // dst = src: a copy within this backend's memory (same dtype and size), queued in stream order like
  // any op, so a recorded pass records it (Model taps). Default: memcpy, for backends whose memory is
  // host memory (the CPU backend); device backends override it.
  virtual void copy(const Tensor& src, const Tensor& dst) {
    check(src.dtype == dst.dtype && src.nbytes() == dst.nbytes(), "backend '", device(), "': copy of ",
          src.rows, "×", src.cols, " ", dtype_name(src.dtype), " into ", dst.rows, "×", dst.cols, " ",
          dtype_name(dst.dtype));
    if (src.data != dst.data) std::memcpy(dst.data, src.data, src.nbytes());
  }
  // x = relu(x)² in place.
  virtual void relu2(const Tensor& x) = 0;
  // The residual add and the next layer's norm: x += b, then y = rms_norm(x, w, eps). x, b, y [n, D];
  // y distinct from x and b. The same bits as add(x, b, x) then rms_norm(x, w, eps, y), the default.
  virtual void add_rms_norm(const Tensor& x, const Tensor& b, const float* w, float eps, const Tensor& y) {
    add(x, b, x);
    rms_norm(x, w, eps, y);
  }
  // Causal GQA attention without positional encoding. q [n, nq·hd], k/v [n, nkv·hd] are the new
  // tokens at positions pos0 .. pos0+n−1; they are written into the caches (rows of nkv·hd) at those
  // positions first. Query i attends to cache rows 0 .. pos0+i. Softmax in fp32, scale hd^−0.5.
  // out [n, nq·hd]. Each row's result is independent of n (batch invariance).
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, float* k_cache,
                         float* v_cache, int64_t capacity, int64_t pos0, int nq, int nkv, int hd,
                         const Tensor& out) = 0;
  // Optional (graph capture): attention() with the position read from device memory when the work
  // runs: *pos0_device (int64, written in stream order before) must equal pos0, the host's copy, which
  // is used for validation only. One recorded launch then serves every position.
  // Default: attention() with pos0 (backends that cannot capture have no use for the device copy).
  virtual void attention_at(const Tensor& q, const Tensor& k, const Tensor& v, float* k_cache, float* v_cache,
                            int64_t capacity, int64_t pos0, const int64_t* pos0_device, int nq, int nkv, int hd,
                            const Tensor& out) {
    (void)pos0_device;
    attention(q, k, v, k_cache, v_cache, capacity, pos0, nq, nkv, hd, out);
  }
  // Sigmoid router: s = sigmoid(logits); selection by s + bias (bias may be null) with
  // group-limited routing; weights from s, renormalized if asked, times scaling.
  // logits [n, E]; ids/weights [n, k], ordered by descending selection score (ties: lower id).
  virtual void moe_route(const Tensor& logits, const float* bias, const RouteParams& p, int32_t* ids,
                         float* weights) = 0;
  // MoE weighted sum: out[t] = Σ_j weights[t·k + j] · expert_out[t·k + j], j in slot order (fixed, so
  // a token's result does not depend on the batch). expert_out [n·k, D], weights [n·k], out [n, D].
  // (Default: not supported, for backends used only by tests of other ops.)
  virtual void moe_combine(const Tensor& expert_out, const float* weights, int k, const Tensor& out) {
    (void)expert_out, (void)weights, (void)k, (void)out;
    fail("backend '", device(), "' has no moe_combine");
  }
  // Ops of drafters with layers of their own (the DFlash backbone of plugins/spec-lilicorr), optional:
  // a backend without them fails naming the op (the default).
  // Rotary embedding (rotate-half layout, HF Llama/Qwen3) in place on x [n, heads·hd]: row r is at
  // position pos0 + r; pair (j, j + hd/2) turns by (pos0 + r)·theta^(−2j/hd) (frequency in double, the
  // angle rounded to f32, cos/sin in f32).
  virtual void rope(const Tensor& x, int heads, int hd, int64_t pos0, double theta) {
    (void)x, (void)heads, (void)hd, (void)pos0, (void)theta;
    fail("backend '", device(), "' has no rope");
  }
  // GQA attention without a mask: every row of q [n, nq·hd] attends to rows 0 .. rows−1 of k and v
  // (rows of nkv·hd, at least `rows` of them). Softmax in fp32, scale hd^−0.5. out [n, nq·hd]. Each
  // row's result is independent of n.
  virtual void attention_full(const Tensor& q, const Tensor& k, const Tensor& v, int64_t rows, int nq, int nkv,
                              int hd, const Tensor& out) {
    (void)q, (void)k, (void)v, (void)rows, (void)nq, (void)nkv, (void)hd, (void)out;
    fail("backend '", device(), "' has no attention_full");
  }
  // Optional (graph capture of a drafter's block pass): rope() with the first position read from device
  // memory when the work runs: *pos0_device (int64, written in stream order before) must equal pos0,
  // the host's copy (validation, and backends that cannot capture). Default: rope() with pos0.
  virtual void rope_at(const Tensor& x, int heads, int hd, int64_t pos0, const int64_t* pos0_device, double theta) {
    (void)pos0_device;
    rope(x, heads, hd, pos0, theta);
  }
  // Optional (drafters with rope_scaling, e.g. yarn): rope() with a frequency table inv_freq [hd/2] in
  // device memory instead of θ: pair (j, j + hd/2) of row r turns by the f32 angle (pos0 + r)·inv_freq[j]
  // (the exact product rounded once, as HF's f32 product), cos and sin in f32 each times `scale` (HF's
  // attention_scaling). pos0 is read from *pos0_device when that is not null (as rope_at). Default: fails
  // naming the op.
  virtual void rope_table(const Tensor& x, int heads, int hd, int64_t pos0, const int64_t* pos0_device,
                          const float* inv_freq, float scale) {
    (void)x, (void)heads, (void)hd, (void)pos0, (void)pos0_device, (void)inv_freq, (void)scale;
    fail("backend '", device(), "' has no rope_table (a frequency-table RoPE: the drafter's rope_scaling)");
  }
  // Optional (graph capture): unmasked attention over a cache that grows. The new rows k/v [n, nkv·hd]
  // are written into the caches (rows of nkv·hd, `capacity` of them) at positions pos0 … pos0 + n − 1,
  // then every row of q [n, nq·hd] attends to cache rows 0 … pos0 + n − 1 (attention_full of those
  // rows). pos0 is read from *pos0_device when the work runs, as attention_at(); the host's pos0 must
  // equal it. out [n, nq·hd]. Default: the copies and attention_full() with the host's pos0.
  virtual void attention_full_at(const Tensor& q, const Tensor& k, const Tensor& v, float* k_cache, float* v_cache,
                                 int64_t capacity, int64_t pos0, const int64_t* pos0_device, int nq, int nkv, int hd,
                                 const Tensor& out) {
    (void)pos0_device;
    const int64_t n = q.rows, kw = int64_t(nkv) * hd;
    check(n > 0 && pos0 >= 0 && pos0 + n <= capacity, "backend '", device(), "': attention_full_at of positions [",
          pos0, ", ", pos0 + n, ") in a cache of ", capacity, " rows");
    const Tensor kc = Tensor::f32(k_cache, capacity, kw), vc = Tensor::f32(v_cache, capacity, kw);
    copy(k, kc.slice_rows(pos0, n));
    copy(v, vc.slice_rows(pos0, n));
    attention_full(q, kc, vc, pos0 + n, nq, nkv, hd, out);
  }
  // SwiGLU: out = silu(g) ⊙ u, silu(v) = v / (1 + e^−v). g, u, out [n, D] (out may alias g or u).
  virtual void silu_mul(const Tensor& g, const Tensor& u, const Tensor& out) {
    (void)g, (void)u, (void)out;
    fail("backend '", device(), "' has no silu_mul");
  }
  // x ← cap·tanh(s·x / cap) in place when cap > 0, else x ← s·x (a logit multiplier and softcap).
  virtual void scale_softcap(const Tensor& x, float s, float cap) {
    (void)x, (void)s, (void)cap;
    fail("backend '", device(), "' has no scale_softcap");
  }
  // Per row of logits [n, V]: the k largest (descending; the lower id first on ties) as ids [n, k]
  // and their log_softmax values logp [n, k] (max + log Σ exp(l − max) over the whole row, NaN when the
  // row holds a NaN or only −inf); ids and logp in this backend's memory. 1 ≤ k ≤ kMaxTopK. NaNs are
  // never picked: a row with fewer than k other values ends in id −1, logp −inf − lse.
  static constexpr int kMaxTopK = 64;
  virtual void top_k_logprobs(const Tensor& logits, int k, int32_t* ids, float* logp) {
    (void)logits, (void)k, (void)ids, (void)logp;
    fail("backend '", device(), "' has no top_k_logprobs");
  }

  // Ops of the LiLiCorr head (a lattice of candidate nodes; plugins/spec-lilicorr/device_head.h), optional
  // like the drafter ops above.
  // Broadcast rows: out[r] = x[r] ⊙ a[r / group] + b[r / group] for the rows r of x [n, D]; a and b are
  // [n / group, D] (group ≥ 1 divides n), and an empty one (data null) stands for 1 or 0. out [n, D]
  // may alias x. (A bias row: b [1, D], group n; a per-slot row: group = the slot's node count.)
  virtual void mul_add_rows(const Tensor& x, const Tensor& a, const Tensor& b, int64_t group, const Tensor& out) {
    (void)x, (void)a, (void)b, (void)group, (void)out;
    fail("backend '", device(), "' has no mul_add_rows");
  }
  // Attention of n rows among themselves with an additive bias, no mask: for head h and row i,
  // out[i] = Σ_j softmax_j(q_i·k_j·hd^−0.5 + bias[h·n + i, j])·v_j. q, k, v, out [n, heads·hd];
  // bias [heads·n, n]. Softmax in fp32.
  virtual void attention_bias(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, int heads, int hd,
                              const Tensor& out) {
    (void)q, (void)k, (void)v, (void)bias, (void)heads, (void)hd, (void)out;
    fail("backend '", device(), "' has no attention_bias");
  }
  // attention_bias() with q|k|v packed per row: qkv [n, 3·heads·hd] (row i: q_i, k_i, v_i, one fused
  // projection's output) and qkv_bias [1, 3·heads·hd] added to every row first (empty: none), as
  // mul_add_rows would add it. bias [heads·n, n]; out [n, heads·hd].
  virtual void attention_bias_qkv(const Tensor& qkv, const Tensor& qkv_bias, const Tensor& bias, int heads, int hd,
                                  const Tensor& out) {
    (void)qkv, (void)qkv_bias, (void)bias, (void)heads, (void)hd, (void)out;
    fail("backend '", device(), "' has no attention_bias_qkv");
  }
  // Sums of rows with broadcasts, then silu if asked: out[r] = f(((x[r] + d[r]) + a[r / ga]) + b[r / gb])
  // for the rows r of x [n, D], added left to right; d [n, D], a [n / ga, D] and b [n / gb, D] may be
  // empty (data null: left out; ga, gb ≥ 1 divide n); f(v) = v / (1 + e^−v) when `silu`, else v. out [n, D]
  // may alias x or d. (A linear's bias: a [1, D], ga = n; a residual: d; a per-slot row: ga = its nodes.)
  virtual void add_rows(const Tensor& x, const Tensor& d, const Tensor& a, int64_t ga, const Tensor& b, int64_t gb,
                        bool silu, const Tensor& out) {
    (void)x, (void)d, (void)a, (void)ga, (void)b, (void)gb, (void)silu, (void)out;
    fail("backend '", device(), "' has no add_rows");
  }
  // x ← x / max(‖x‖₂, eps) per row, in place.
  virtual void normalize_rows(const Tensor& x, float eps) {
    (void)x, (void)eps;
    fail("backend '", device(), "' has no normalize_rows");
  }
  // Dot products within groups: a [G·ka, F], b [G·kb, F], out [G, ka·kb] with
  // out[g, i·kb + j] = scale·⟨a[g·ka + i], b[g·kb + j]⟩ (the dot in fp32, then times scale).
  virtual void group_dots(const Tensor& a, const Tensor& b, int64_t groups, float scale, const Tensor& out) {
    (void)a, (void)b, (void)groups, (void)scale, (void)out;
    fail("backend '", device(), "' has no group_dots");
  }

  // Picks one token from logits [V] (host or device memory of this backend).
  virtual int32_t sample(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng) = 0;

  // Optional, for benchmarks. The device memory's copy bandwidth in bytes/s, measured now with a large
  // copy within the device and counting bytes read plus bytes written (0 = not measured). Synchronizes.
  virtual double measure_copy_bandwidth() { return 0.0; }
  // The most device memory this backend has held at once, in bytes (0 = unknown).
  virtual size_t peak_memory_bytes() const { return 0; }

  // Optional: concurrent lanes inside a pass, for independent work that alone would leave the device
  // idle (a layer's shared expert beside its routed experts). fork(n) opens lanes 1 .. n−1, each
  // starting after the work queued so far; lane(i) sends the ops that follow to lane i (0 = the main
  // queue); wait_lane(i) makes the current lane wait for the work queued on lane i so far; join()
  // makes lane 0 wait for every lane, sends ops to lane 0 again and closes the lanes. Work on two
  // lanes may run at the same time: it must write disjoint memory and read nothing the other writes.
  // Lanes are recorded by graph capture like any op. Nothing may synchronize while lanes are open.
  // Default: one queue, in order (every lane is lane 0), which is always correct.
  virtual void fork(int lanes) { (void)lanes; }
  virtual void lane(int i) { (void)i; }
  virtual void wait_lane(int i) { (void)i; }
  virtual void join() {}

  // Optional: graph capture (CUDA graphs). Between begin_capture() and end_capture() the ops queued on
  // this thread are recorded, not run. begin_capture() returns false when the backend cannot capture
  // (the default); then nothing is recording. end_capture() returns the graph, or nullptr when the
  // recording cannot be replayed (an allocation or release of a buffer happened during it); a queued
  // op that synchronizes throws during the capture, after which end_capture() must still be called.
  virtual bool begin_capture() { return false; }
  virtual std::unique_ptr<Graph> end_capture() { return nullptr; }
  // Whether Model::load switches graphs of verify passes on: "" when this backend records them and
  // nothing (an environment switch of its own) says otherwise; else why not, in one line. Default:
  // this backend cannot record.
  virtual std::string graphs_off_reason() const { return "backend '" + device() + "' cannot record graphs"; }
  // A counter that changes whenever a buffer of this backend from alloc() is released (one from
  // alloc_detached() leaves it): a graph recorded under another value may hold addresses that were
  // freed (or handed to someone else) since.
  virtual uint64_t memory_epoch() const { return 0; }
};

}  // namespace tandem
