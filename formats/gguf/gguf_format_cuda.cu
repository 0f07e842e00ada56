// GgufCudaTensor and GgufCudaExperts: glue from the weight interfaces to the per-type CUDA kernels
// (quant_cuda.cuh), for dense NVFP4 and Q8_0 matrices also the tensor-core decode/verify GEMV
// (gemv_tc_cuda.cuh) and the prefill GEMM and row decoder on its repacked copy (gemm_tc_cuda.cuh),
// and for the dense types the safetensors dense kernels. The CUDA twin of
// gguf_format.cpp; validation is the CPU GgufTensor's, so both devices accept and reject the same
// tensors with the same messages.
#include "gguf_format_cuda.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "tandem/cuda/util.cuh"
#include "tandem/cuda/dense.cuh"
#include "tandem/cuda/lane_arena.cuh"
#include "tandem/cuda/stream_scratch.cuh"
#include "gemm_tc_cuda.cuh"
#include "gemv_tc_cuda.cuh"
#include "gguf_format.h"
#include "llama_act_cuda.h"
#include "quant_cuda.cuh"
#include "tandem/error.h"

namespace tandem::gguf {
namespace {

#include "iq_tables.inc"

using cuda::check_cuda;
using cuda::check_launch;

// The lookup grid an i-quant's kernels read (copied to shared memory per block).
struct Grid {
  const void* data = nullptr;
  size_t bytes = 0;
};
Grid grid_of(const std::string& type) {
  if (type == "IQ2_XXS") return {iq2xxs_grid, sizeof(iq2xxs_grid)};
  if (type == "IQ2_XS") return {iq2xs_grid, sizeof(iq2xs_grid)};
  if (type == "IQ2_S") return {iq2s_grid, sizeof(iq2s_grid)};
  if (type == "IQ3_XXS") return {iq3xxs_grid, sizeof(iq3xxs_grid)};
  if (type == "IQ3_S") return {iq3s_grid, sizeof(iq3s_grid)};
  if (type == "IQ1_M") return {iq1s_grid, sizeof(iq1s_grid)};
  return {};
}

// How a type multiplies on the GPU: the dense kernels, or its block kernels.
struct Kernels {
  bool dense = false;
  cuda::WType wtype = cuda::WType::F32;
  const CudaQuantOps* ops = nullptr;
};
Kernels kernels_of(const QuantType& t, const std::string& tensor) {
  const std::string name = t.name;
  if (name == "F32") return {true, cuda::WType::F32, nullptr};
  if (name == "F16") return {true, cuda::WType::F16, nullptr};
  if (name == "BF16") return {true, cuda::WType::BF16, nullptr};
#define TANDEM_GGUF_CUDA_MATCH(T) \
  if (name == #T) return {false, cuda::WType::F32, &cuda_ops_##T()};
  TANDEM_GGUF_CUDA_TYPES(TANDEM_GGUF_CUDA_MATCH)
#undef TANDEM_GGUF_CUDA_MATCH
  fail("gguf (cuda): tensor '", tensor, "' has ggml type ", name, ", which has no CUDA kernel");
}

// Device copy of `parts` back to back, with zeroed slack after them: kernels read whole aligned
// 16-byte pieces and a word past a field, never beyond 64 bytes.
constexpr size_t kSlack = 64;
std::unique_ptr<Buffer> upload_parts(Backend& be, const std::vector<std::pair<const uint8_t*, size_t>>& parts) {
  size_t total = 0;
  for (const auto& p : parts) total += p.second;
  auto buf = be.alloc(total + kSlack);
  auto* dst = static_cast<uint8_t*>(buf->data());
  size_t at = 0;
  for (const auto& [src, n] : parts) {
    be.upload(dst + at, src, n);
    at += n;
  }
  check_cuda(cudaMemsetAsync(dst + total, 0, kSlack, cuda::stream()), "gguf (cuda): clear slack");
  return buf;
}

std::unique_ptr<Buffer> upload_grid(Backend& be, const std::string& type) {
  const Grid g = grid_of(type);
  if (!g.data) return nullptr;
  return upload_parts(be, {{static_cast<const uint8_t*>(g.data), g.bytes}});
}

// Prefill on the type's tensor-core GEMM (CudaQuantOps::gemm), with its workspace.
void run_gemm(const CudaQuantOps& ops, const CudaMatmulArgs& a) {
  cuda::StreamScratch ws(ops.gemm_workspace(a), 0, "gguf (cuda): allocate prefill workspace");
  ops.gemm(a, ws.get(), cuda::stream());
}

// y *= s, for a dense weight with a sidecar scale (the block kernels scale in place).
__global__ void scale_kernel(float* y, int64_t n, float s) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] *= s;
}
// Row r of y (m wide) *= scale[ids[r]] for ids in range (a dense expert gather with sidecars).
__global__ void scale_gathered_kernel(float* y, int64_t m, int64_t rows, const int32_t* ids, const float* scale,
                                      int n_experts) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int32_t e = ids[r];
    if (e < 0 || e >= n_experts) continue;
    for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < m; o += int64_t(gridDim.x) * blockDim.x)
      y[r * m + o] *= scale[e];
  }
}
void launch_scale(float* y, int64_t n, float s) {
  if (n == 0 || s == 1.0f) return;
  scale_kernel<<<unsigned(std::min<int64_t>(cuda::ceil_div(n, 256), 1024)), 256, 0, cuda::stream()>>>(y, n, s);
  check_launch("gguf scale");
}

// Passes of 1..16 rows (decode, verify) of a dense NVFP4 or Q8_0 matrix run on the tensor-core GEMV
// (gemv_tc_cuda.cuh) from a repacked copy; TANDEM_GGUF_TC=0 keeps no copy and runs the fp32 GEMV on
// the file's blocks. Read per tensor at load: every pass of one tensor takes one path, so a row's
// bits never depend on n.
bool env_off(const char* name) {
  const char* e = std::getenv(name);
  return e && std::string(e) == "0";
}
bool tc_enabled() { return !env_off("TANDEM_GGUF_TC"); }
// With the copy, the prefill GEMM, get_rows and dequantize read it too (gemm_tc_cuda.cuh, the same
// bits as on the blocks) and the file's blocks are not kept: one device copy (issue #18).
// TANDEM_GGUF_ONE_COPY=0 (read per tensor at load) keeps the blocks beside the copy for those
// readers, as before: the side-by-side test and benchmark of the two GEMMs.
bool one_copy_enabled() { return !env_off("TANDEM_GGUF_ONE_COPY"); }

// The llama activation mode (TANDEM_GGUF_ACTIVATIONS=llama, read when a tensor loads): IQ2_XXS
// matmuls and gathers round each activation row to Q8_K on the device and multiply on __dp4a
// (llama_act_cuda.h), for every n (prefill too: the mode's results, not the fp32 GEMM's), with the
// CPU llama mode's bits. The other types keep their fp32 path: a line on stderr names each such type
// once per process (F16 and BF16 too, whose rounding the CPU mode applies; not F32, which has none).
enum class ActPath { F32, LlamaIq2Xxs };
ActPath act_path_of(const QuantType& t) {
  if (!llama_activations_requested()) return ActPath::F32;
  if (std::string(t.name) == "IQ2_XXS") return ActPath::LlamaIq2Xxs;
  if (t.act != ActFormat::F32) {
    static std::mutex mu;
    static std::string told;
    std::lock_guard<std::mutex> lock(mu);
    const std::string tag = std::string("|") + t.name + "|";
    if (told.find(tag) == std::string::npos) {
      told += tag;
      std::fprintf(stderr,
                   "gguf (cuda): TANDEM_GGUF_ACTIVATIONS=llama: %s has no CUDA llama-mode kernel (only IQ2_XXS "
                   "has); its tensors keep fp32 activations on the GPU (the CPU runs the whole mode)\n",
                   t.name);
    }
  }
  return ActPath::F32;
}

// Device room for n Q8_K activation rows of k: the lane's arena (reserved at load for 16 rows, so a
// captured decode pass allocates nothing), else stream-ordered scratch for this call.
class Q8kRows {
 public:
  Q8kRows(int64_t n, int64_t k) {
    const size_t bytes = size_t(n * cuda_q8k_row_bytes(k));
    unsigned* ctr = nullptr;
    if (cuda::LaneArena::get().lease(bytes, 0, cuda::stream(), &p_, &ctr)) return;
    scratch_ = std::make_unique<cuda::StreamScratch>(bytes, 0, "gguf (cuda): allocate q8k activations");
    p_ = scratch_->get();
  }
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
  std::unique_ptr<cuda::StreamScratch> scratch_;
};
constexpr int64_t kLlamaReserveRows = 16;

void check_f32_rows(const char* op, const std::string& name, const Tensor& t, int64_t rows, int64_t cols) {
  if (t.dtype != DType::F32 || t.rows != rows || t.cols != cols)
    fail(op, ": tensor '", name, "': ", dtype_name(t.dtype), " [", t.rows, ", ", t.cols, "], expected f32 [", rows,
         ", ", cols, "]");
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

class GgufCudaTensor final : public QuantizedTensor {
 public:
  GgufCudaTensor(const RawTensor& raw, const QuantType& type, const RawTensor* scale, Backend& be)
      : name_(raw.name), type_(type), kernels_(kernels_of(type, raw.name)) {
    const GgufTensor host(raw, type, scale);  // the CPU checks: shape, size, whole blocks, the scale
    shape_ = host.shape();
    scale_ = host.scale();
    row_len_ = shape_.empty() ? 1 : shape_.back();
    n_rows_ = numel_of(shape_) / row_len_;
    row_bytes_ = row_bytes(type, row_len_);
    nbytes_ = raw.nbytes;
    grid_ = upload_grid(be, type.name);
    act_ = act_path_of(type);
    if (act_ == ActPath::LlamaIq2Xxs) {
      data_ = upload_parts(be, {{raw.data, raw.nbytes}});
      cuda::LaneArena::reserve_all(size_t(kLlamaReserveRows * cuda_q8k_row_bytes(row_len_)), 0, cuda::stream());
      return;  // no repacked copy: every pass runs the llama-mode kernels
    }
    const kcuda::TcType* tc = kcuda::tc_type_of(type.name);
    const bool repack = tc && shape_.size() == 2 && tc_enabled();
    // One copy unless switched off or the repack would lose a value (an NVFP4 scale byte 0xFF).
    const bool one_copy = repack && one_copy_enabled() && kcuda::tc_repack_is_lossless(*tc, raw.data, n_rows_, row_len_);
    if (!one_copy) data_ = upload_parts(be, {{raw.data, raw.nbytes}});
    if (repack) {
      tc_shape_ = kcuda::tc_shape(*tc, n_rows_, row_len_);
      const std::vector<uint8_t> packed = kcuda::repack_tc(*tc, raw.data, n_rows_, row_len_, raw.name);
      tc_ = upload_parts(be, {{packed.data(), packed.size()}});
      tc_plan_ = kcuda::tc_plan(tc_shape_);
      cuda::LaneArena::reserve_all(tc_shape_.workspace_bytes(), tc_shape_.counters(), cuda::stream());
      check_cuda(cudaStreamSynchronize(cuda::stream()), "gguf (cuda): upload tc copy");  // `packed` dies here
    }
  }

  std::string type_name() const override { return type_.name; }
  size_t bytes() const override { return nbytes_; }

  void get_rows(const int32_t* ids, int n, const Tensor& out) const override {
    check(shape_.size() == 2, "get_rows: tensor '", name_, "' has shape ", shape_str(shape_), ", expected 2-D");
    check_f32_rows("get_rows", name_, out, n, row_len_);
    for (int i = 0; i < n; ++i)
      if (ids[i] < 0 || ids[i] >= n_rows_)
        fail("get_rows: tensor '", name_, "': id ", ids[i], " at position ", i, " is outside [0, ", n_rows_, ")");
    if (kernels_.dense) {
      cuda::launch_dense_get_rows(kernels_.wtype, data(), row_len_, ids, n, out.f32(), cuda::stream());
      launch_scale(out.f32(), int64_t(n) * row_len_, scale_);
      return;
    }
    if (one_copy()) return kcuda::launch_tc_rows(tc_data(), tc_shape_, ids, n, scale_, out.f32(), cuda::stream());
    for (int i0 = 0; i0 < n; i0 += kCudaRowIdsPerLaunch) {
      CudaRowsArgs a = rows_args(out.f32() + int64_t(i0) * row_len_);
      a.n = std::min(kCudaRowIdsPerLaunch, n - i0);
      a.by_id = true;
      std::memcpy(a.ids, ids + i0, size_t(a.n) * sizeof(int32_t));
      kernels_.ops->rows(a, cuda::stream());
    }
  }

  void dequantize(float* out_host) const override {
    const cudaStream_t s = cuda::stream();
    if (kernels_.dense) {  // the bytes back, decoded by the CPU kernels
      std::vector<uint8_t> bytes(nbytes_);
      check_cuda(cudaMemcpyAsync(bytes.data(), data(), nbytes_, cudaMemcpyDeviceToHost, s), "dequantize: download");
      check_cuda(cudaStreamSynchronize(s), "dequantize: synchronize");
      RawTensor raw{name_, type_.name, shape_, bytes.data(), bytes.size(), ""};
      GgufTensor(raw, type_, nullptr).dequantize(out_host);
      if (scale_ != 1.0f)
        for (int64_t i = 0, n = n_rows_ * row_len_; i < n; ++i) out_host[i] *= scale_;
      return;
    }
    const size_t n = size_t(n_rows_ * row_len_) * sizeof(float);
    void* dev = nullptr;
    check_cuda(cudaMallocAsync(&dev, std::max<size_t>(n, 4), s), "dequantize: allocate");
    if (one_copy()) {
      kcuda::launch_tc_rows(tc_data(), tc_shape_, nullptr, 0, scale_, static_cast<float*>(dev), s);
    } else {
      CudaRowsArgs a = rows_args(static_cast<float*>(dev));
      a.n = n_rows_;
      kernels_.ops->rows(a, s);
    }
    const cudaError_t copied = cudaMemcpyAsync(out_host, dev, n, cudaMemcpyDeviceToHost, s);
    check_cuda(cudaFreeAsync(dev, s), "dequantize: free");
    check_cuda(copied, "dequantize: download");
    check_cuda(cudaStreamSynchronize(s), "dequantize: synchronize");
  }

 protected:
  void matmul_raw(const Tensor& x, const Tensor& y) const override {
    const int64_t m = rows(), k = cols();
    if (kernels_.dense) {
      cuda::launch_dense_matmul(kernels_.wtype, data(), m, k, x.f32(), x.rows, y.f32(), cuda::stream());
      launch_scale(y.f32(), x.rows * m, scale_);
      return;
    }
    block_matmul(x, y, Epilogue::None);
  }
  // The block kernels store through the epilogue; the dense path (a separate scale kernel) does not.
  bool matmul_fused_raw(const Tensor& x, const Tensor& y, Epilogue ep) const override {
    if (kernels_.dense) return false;
    block_matmul(x, y, ep);
    return true;
  }

 private:
  void block_matmul(const Tensor& x, const Tensor& y, Epilogue ep) const {
    const int64_t m = rows(), k = cols();
    CudaMatmulArgs a;
    a.epilogue = int(ep);
    a.w = data_ ? data() : nullptr;  // null: one copy, every pass below reads tc_
    a.m = m, a.k = k, a.row_bytes = row_bytes_;
    a.x = x.f32(), a.y = y.f32(), a.n = x.rows;
    a.scale = scale_;
    a.grid = grid_ ? grid_->data() : nullptr;
    if (act_ == ActPath::LlamaIq2Xxs) {
      const Q8kRows xq(a.n, k);
      launch_quantize_q8k(a.x, a.n, k, xq.get(), cuda::stream());
      return launch_iq2_xxs_q8k(a, xq.get(), cuda::stream());
    }
    if (a.n >= kCudaGemmMinRows && one_copy()) return tc_gemm(a);
    if (a.n >= kCudaGemmMinRows && kernels_.ops->gemm) return run_gemm(*kernels_.ops, a);
    if (tc_) return tc_matmul(a);
    kernels_.ops->matmul(a, cuda::stream());
  }

  // The tensor-core GEMV on the repacked copy, its workspace from the lane's arena (reserved at load,
  // so a captured pass allocates nothing), or for one call from the stream's pool.
  void tc_matmul(const CudaMatmulArgs& a) const {
    const size_t bytes = tc_shape_.workspace_bytes(), counters = tc_shape_.counters();
    const cudaStream_t s = cuda::stream();
    const auto* w = static_cast<const uint8_t*>(tc_->data());
    void* ws = nullptr;
    unsigned* ctr = nullptr;
    if (cuda::LaneArena::get().lease(bytes, counters, s, &ws, &ctr)) {
      kcuda::launch_gemv_tc(w, tc_shape_, a.x, a.y, a.n, a.scale, a.epilogue, static_cast<float*>(ws), ctr, s,
                            &tc_plan_);
      return;
    }
    cuda::StreamScratch scratch(bytes, counters, "gguf (cuda): allocate tc gemv scratch");
    kcuda::launch_gemv_tc(w, tc_shape_, a.x, a.y, a.n, a.scale, a.epilogue, static_cast<float*>(scratch.get()),
                          scratch.counters(), s, &tc_plan_);
  }

  // Prefill on the repacked copy (one copy), with gemm_cuda.cuh's workspace.
  void tc_gemm(const CudaMatmulArgs& a) const {
    cuda::StreamScratch ws(kcuda::gemm_tc_workspace(a.n, a.k), 0, "gguf (cuda): allocate prefill workspace");
    kcuda::launch_gemm_tc(tc_data(), tc_shape_, a.x, a.y, a.n, a.scale, a.epilogue, ws.get(), cuda::stream());
  }

  // The file's blocks; a one-copy tensor has none, and every reader of it takes tc_ instead.
  const uint8_t* data() const {
    check(data_ != nullptr, "gguf (cuda): tensor '", name_, "' keeps only its repacked copy (one copy)");
    return static_cast<const uint8_t*>(data_->data());
  }
  const uint8_t* tc_data() const { return static_cast<const uint8_t*>(tc_->data()); }
  // Only the repacked copy is on the device (every other path uploads the file's blocks).
  bool one_copy() const { return !data_; }
  CudaRowsArgs rows_args(float* out) const {
    CudaRowsArgs a;
    a.w = data();
    a.k = row_len_, a.row_bytes = row_bytes_;
    a.scale = scale_;
    a.grid = grid_ ? grid_->data() : nullptr;
    a.out = out;
    return a;
  }

  std::string name_;
  const QuantType& type_;
  Kernels kernels_;
  ActPath act_ = ActPath::F32;
  int64_t row_len_ = 0, n_rows_ = 0, row_bytes_ = 0;
  size_t nbytes_ = 0;
  float scale_ = 1.0f;
  std::unique_ptr<Buffer> data_, grid_;
  std::unique_ptr<Buffer> tc_;  // the repacked copy (null: none)
  kcuda::TcShape tc_shape_;
  kcuda::TcPlan tc_plan_;
};

// Expert sets (MoE routed experts) keep the fp32 gather for every n (the llama-mode gather in that
// mode, for IQ2_XXS): no repacked copy.
class GgufCudaExperts final : public ExpertSet {
 public:
  GgufCudaExperts(const std::vector<const RawTensor*>& experts, const std::vector<const RawTensor*>& scales,
                  Backend& be) {
    check(!experts.empty() && scales.size() == experts.size(), "gguf (cuda): an expert set needs at least one expert");
    const RawTensor& first = *experts[0];
    name_ = first.name;
    const QuantType* type = find_type(first.dtype);
    check(type != nullptr, "gguf (cuda): tensor '", first.name, "' has ggml type ", first.dtype,
          ", which tandem cannot compute");
    type_ = type;
    kernels_ = kernels_of(*type, first.name);
    check(first.shape.size() == 2, "gguf (cuda): expert '", first.name, "' has shape ", shape_str(first.shape),
          ", expected 2-D");
    n_ = int(experts.size());
    m_ = first.shape[0];
    k_ = first.shape[1];
    per_ = first.nbytes;
    bool contiguous = true, any_scale = false;
    std::vector<float> scale_values;
    for (int e = 0; e < n_; ++e) {
      const RawTensor& t = *experts[size_t(e)];
      check(t.dtype == first.dtype && t.shape == first.shape, "gguf (cuda): expert '", t.name, "' is ", t.dtype, " ",
            shape_str(t.shape), ", expected ", first.dtype, " ", shape_str(first.shape), " like '", first.name, "'");
      const GgufTensor host(t, *type, scales[size_t(e)]);  // size, blocks and scale checks
      scale_values.push_back(host.scale());
      any_scale = any_scale || scales[size_t(e)] != nullptr;
      contiguous = contiguous && t.data == first.data + size_t(e) * per_;
    }
    std::vector<std::pair<const uint8_t*, size_t>> parts;
    if (contiguous) {
      parts.push_back({first.data, per_ * size_t(n_)});  // one stacked file tensor: one copy
    } else {
      for (const RawTensor* t : experts) parts.push_back({t->data, per_});
    }
    data_ = upload_parts(be, parts);
    grid_ = upload_grid(be, type->name);
    act_ = act_path_of(*type);
    if (act_ == ActPath::LlamaIq2Xxs)
      cuda::LaneArena::reserve_all(size_t(kLlamaReserveRows * cuda_q8k_row_bytes(k_)), 0, cuda::stream());
    if (any_scale) {
      scales_ = be.alloc(scale_values.size() * sizeof(float));
      be.upload(scales_->data(), scale_values.data(), scale_values.size() * sizeof(float));
    }
  }

  int n_experts() const override { return n_; }
  int64_t rows() const override { return m_; }
  int64_t cols() const override { return k_; }
  std::string type_name() const override { return type_->name; }
  size_t bytes() const override { return per_ * size_t(n_); }

  void gather_matmul(const Tensor& x, const int32_t* ids, int k, const Tensor& y) const override {
    gather(x, ids, k, y, Epilogue::None);
  }
  bool gather_matmul_fused(const Tensor& x, const int32_t* ids, int k, const Tensor& y, Epilogue ep) const override {
    if (kernels_.dense) return false;  // the dense gather scales in a kernel of its own
    gather(x, ids, k, y, ep);
    return true;
  }

 private:
  void gather(const Tensor& x, const int32_t* ids, int k, const Tensor& y, Epilogue ep) const {
    if (k < 1) fail("gather_matmul: experts '", name_, "' …: k must be positive, found ", k);
    check_f32_rows("gather_matmul", name_, x, x.rows, k_);
    check_f32_rows("gather_matmul", name_, y, x.rows * k, m_);
    if (y.rows == 0) return;
    if (!ids) fail("gather_matmul: experts '", name_, "' …: ids are null");
    const float* es = scales_ ? static_cast<const float*>(scales_->data()) : nullptr;
    if (kernels_.dense) {
      cuda::launch_dense_gather_matmul(kernels_.wtype, data_->data(), n_, m_, k_, x.f32(), ids, k, y.rows,
                                              y.f32(), cuda::stream());
      if (es) {
        const dim3 grid(unsigned(std::min<int64_t>(cuda::ceil_div(m_, 256), 64)),
                        unsigned(std::min<int64_t>(y.rows, 65535)));
        scale_gathered_kernel<<<grid, 256, 0, cuda::stream()>>>(y.f32(), m_, y.rows, ids, es, n_);
        check_launch("gguf gather scale");
      }
      return;
    }
    CudaMatmulArgs a;
    a.w = static_cast<const uint8_t*>(data_->data());
    a.m = m_, a.k = k_, a.row_bytes = row_bytes(*type_, k_);
    a.x = x.f32(), a.y = y.f32(), a.n = y.rows;
    a.grid = grid_ ? grid_->data() : nullptr;
    a.ids = ids, a.per_x = k, a.n_experts = n_;
    a.expert_bytes = int64_t(per_);
    a.expert_scale = es;
    a.epilogue = int(ep);
    if (act_ == ActPath::LlamaIq2Xxs) {
      const Q8kRows xq(x.rows, k_);
      launch_quantize_q8k(a.x, x.rows, k_, xq.get(), cuda::stream());
      return launch_iq2_xxs_q8k(a, xq.get(), cuda::stream());
    }
    if (a.n >= kCudaGatherGemmMinItems && kernels_.ops->gemm && n_ <= kCudaGatherGemmMaxExperts)
      return run_gemm(*kernels_.ops, a);
    kernels_.ops->gather(a, cuda::stream());
  }

  std::string name_;
  const QuantType* type_ = nullptr;
  Kernels kernels_;
  ActPath act_ = ActPath::F32;
  int n_ = 0;
  int64_t m_ = 0, k_ = 0;
  size_t per_ = 0;
  std::unique_ptr<Buffer> data_, grid_, scales_;
};

}  // namespace

std::unique_ptr<QuantizedTensor> load_gguf_cuda(const RawTensor& raw, const QuantType& type, const RawTensor* scale,
                                                Backend& backend) {
  return std::make_unique<GgufCudaTensor>(raw, type, scale, backend);
}

std::unique_ptr<ExpertSet> load_gguf_experts_cuda(const std::vector<const RawTensor*>& experts,
                                                  const std::vector<const RawTensor*>& scales, Backend& backend) {
  return std::make_unique<GgufCudaExperts>(experts, scales, backend);
}

}  // namespace tandem::gguf
