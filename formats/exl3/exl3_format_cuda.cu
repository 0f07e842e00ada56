// Exl3CudaTensor and Exl3CudaExperts: glue from the weight interfaces to the EXL3 CUDA kernels
// (matmul_cuda.cuh). Validation is parse_group's, so both devices accept and reject the same groups
// with the same messages.
#include "formats/exl3/exl3_format_cuda.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "tandem/cuda/util.cuh"
#include "formats/exl3/matmul_cuda.cuh"
#include "formats/exl3/trellis.h"
#include "tandem/cuda/lane_arena.cuh"
#include "tandem/cuda/stream_scratch.cuh"
#include "tandem/error.h"

namespace tandem::exl3 {
namespace {

using cuda::check_cuda;

// Scratch for one call that the arena cannot serve (prefill, a capture that would need the arena to
// grow): tandem/cuda/stream_scratch.cuh.
class Scratch : public cuda::StreamScratch {
 public:
  Scratch(size_t bytes, size_t counters) : StreamScratch(bytes, counters, "exl3: allocate scratch") {}
};

// Scratch shared by every EXL3 tensor of the process for the decode GEMV and small gathers
// (tandem/cuda/lane_arena.cuh): one per lane, reserved at load.
using Arena = cuda::LaneArena;

constexpr int64_t kArenaGatherRows = 256;  // gathers up to this many rows run in the arena

void check_f32_rows(const char* op, const std::string& name, const Tensor& t, int64_t rows, int64_t cols) {
  if (t.dtype != DType::F32 || t.rows != rows || t.cols != cols)
    fail(op, ": tensor '", name, "': ", dtype_name(t.dtype), " [", t.rows, ", ", t.cols, "], expected f32 [", rows,
         ", ", cols, "]");
}

size_t member_bytes(const TensorGroup& g, const char* a, const char* b = nullptr) {
  const RawTensor* t = g.member(a);
  if (!t && b) t = g.member(b);
  return t ? t->nbytes : 0;
}
// What one pass reads as stored (the CPU tensor's count): trellis, scales and bias.
size_t stored_bytes(const TensorGroup& g) {
  return member_bytes(g, "trellis") + member_bytes(g, "suh", "su") + member_bytes(g, "svh", "sv") +
         member_bytes(g, "bias");
}

std::string type_of(const Layout& l) { return "EXL3_K" + std::to_string(l.K) + "_" + codebook_name(l.codebook); }

std::unique_ptr<Buffer> upload_floats(Backend& be, const std::vector<float>& v) {
  auto b = be.alloc(std::max<size_t>(v.size(), 1) * sizeof(float));
  if (!v.empty()) be.upload(b->data(), v.data(), v.size() * sizeof(float));
  return b;
}

// The kernels' view of one tensor's (or one stacked set's) device buffers; bias may be null.
kcuda::DeviceWeights device_weights_of(const Layout& l, Buffer& trellis, Buffer& suh, Buffer& svh, Buffer* bias,
                                       int n_experts) {
  kcuda::DeviceWeights w;
  w.trellis = static_cast<const uint32_t*>(trellis.data());
  w.K = l.K, w.cb = int(l.codebook);
  w.k = l.k, w.n = l.n, w.in_features = l.in_features, w.out_features = l.out_features;
  w.suh = static_cast<const float*>(suh.data());
  w.svh = static_cast<const float*>(svh.data());
  w.bias = bias ? static_cast<const float*>(bias->data()) : nullptr;
  w.n_experts = n_experts;
  return w;
}

// Downloads the trellis from the device and reconstructs W (out_features × in_features).
std::vector<float> reconstruct_from_device(const Layout& shape, const void* dev_trellis) {
  std::vector<uint16_t> words(shape.trellis_bytes() / 2);
  const cudaStream_t s = cuda::stream();
  check_cuda(cudaMemcpyAsync(words.data(), dev_trellis, shape.trellis_bytes(), cudaMemcpyDeviceToHost, s),
             "exl3: download trellis");
  check_cuda(cudaStreamSynchronize(s), "exl3: synchronize");
  Layout l = shape;
  l.trellis = words.data();
  return reconstruct(l);
}

class Exl3CudaTensor final : public QuantizedTensor {
 public:
  Exl3CudaTensor(const TensorGroup& group, Backend& be) : l_(parse_group(group)), bytes_(stored_bytes(group)) {
    shape_ = {l_.out_features, l_.in_features};
    trellis_ = be.alloc(l_.trellis_bytes());
    be.upload(trellis_->data(), l_.trellis, l_.trellis_bytes());
    l_.trellis = nullptr;  // the checkpoint's bytes are not kept
    suh_ = upload_floats(be, l_.suh);
    svh_ = upload_floats(be, l_.svh);
    if (!l_.bias.empty()) bias_ = upload_floats(be, l_.bias);
    const kcuda::DeviceWeights w = device_weights();
    size_t bytes = 0, counters = 0;
    for (int64_t rows = 1; rows <= 16; ++rows) {
      bytes = std::max(bytes, kcuda::matmul_workspace_bytes(w, rows));
      counters = std::max(counters, kcuda::matmul_counters(w, rows));
    }
    Arena::reserve_all(bytes, counters, cuda::stream());
  }

  std::string type_name() const override { return type_of(l_); }
  size_t bytes() const override { return bytes_; }

  // Rare for EXL3 (packs keep embeddings unquantized): the whole weight reconstructed on the host.
  void get_rows(const int32_t* ids, int n, const Tensor& out) const override {
    check_f32_rows("get_rows", l_.name, out, n, l_.in_features);
    for (int i = 0; i < n; ++i)
      check(ids[i] >= 0 && ids[i] < l_.out_features, "get_rows: tensor '", l_.name, "': id ", ids[i],
            " at position ", i, " is outside [0, ", l_.out_features, ")");
    if (n == 0) return;
    const std::vector<float> w = reconstruct_from_device(l_, trellis_->data());
    std::vector<float> rows(size_t(n) * size_t(l_.in_features));
    for (int i = 0; i < n; ++i)
      std::memcpy(rows.data() + size_t(i) * size_t(l_.in_features), w.data() + size_t(ids[i]) * size_t(l_.in_features),
                  size_t(l_.in_features) * sizeof(float));
    check_cuda(cudaMemcpyAsync(out.f32(), rows.data(), rows.size() * sizeof(float), cudaMemcpyHostToDevice,
                               cuda::stream()),
               "get_rows: upload");
    check_cuda(cudaStreamSynchronize(cuda::stream()), "get_rows: synchronize");  // `rows` dies here
  }

  void dequantize(float* out_host) const override {
    const std::vector<float> w = reconstruct_from_device(l_, trellis_->data());
    std::memcpy(out_host, w.data(), w.size() * sizeof(float));
  }

 protected:
  void matmul_raw(const Tensor& x, const Tensor& y) const override { run(x, y, Epilogue::None); }
  // Every path ends in one store per output (finish_output), which applies the epilogue.
  bool matmul_fused_raw(const Tensor& x, const Tensor& y, Epilogue ep) const override {
    run(x, y, ep);
    return true;
  }

 private:
  void run(const Tensor& x, const Tensor& y, Epilogue ep) const {
    kcuda::DeviceWeights w = device_weights();
    w.epilogue = int(ep);
    const size_t bytes = kcuda::matmul_workspace_bytes(w, x.rows), counters = kcuda::matmul_counters(w, x.rows);
    void* ws = nullptr;
    unsigned* ctr = nullptr;
    if (x.rows <= 16 && Arena::get().lease(bytes, counters, cuda::stream(), &ws, &ctr)) {
      kcuda::launch_matmul(w, x.f32(), x.rows, y.f32(), ws, ctr, cuda::stream());
      return;
    }
    Scratch s(bytes, counters);
    kcuda::launch_matmul(w, x.f32(), x.rows, y.f32(), s.get(), s.counters(), cuda::stream());
  }

  kcuda::DeviceWeights device_weights() const {
    return device_weights_of(l_, *trellis_, *suh_, *svh_, bias_.get(), 1);
  }

  Layout l_;
  size_t bytes_ = 0;
  std::unique_ptr<Buffer> trellis_, suh_, svh_, bias_;
};

class Exl3CudaExperts final : public ExpertSet {
 public:
  Exl3CudaExperts(const std::vector<TensorGroup>& groups, Backend& be) {
    check(!groups.empty(), "exl3 (cuda): an expert set needs at least one expert");
    n_ = int(groups.size());
    std::vector<Layout> ls;
    for (const auto& g : groups) {
      ls.push_back(parse_group(g));
      const Layout& a = ls.front();
      const Layout& b = ls.back();
      check(b.K == a.K && b.codebook == a.codebook && b.k == a.k && b.n == a.n && b.in_features == a.in_features &&
                b.out_features == a.out_features,
            "exl3 (cuda): expert '", b.name, "' is ", type_of(b), " [", b.out_features, ", ", b.in_features,
            "] stored ", b.n, " × ", b.k, ", expected ", type_of(a), " [", a.out_features, ", ", a.in_features,
            "] stored ", a.n, " × ", a.k, " like '", a.name, "'");
      bytes_ += stored_bytes(g);
    }
    first_ = ls.front();
    first_.trellis = nullptr;
    first_.suh.clear(), first_.svh.clear(), first_.bias.clear();
    const size_t per = ls.front().trellis_bytes();
    trellis_ = be.alloc(per * size_t(n_));
    auto* dst = static_cast<uint8_t*>(trellis_->data());
    bool contiguous = true;
    for (int e = 1; e < n_; ++e)
      contiguous = contiguous && reinterpret_cast<const uint8_t*>(ls[size_t(e)].trellis) ==
                                     reinterpret_cast<const uint8_t*>(ls[0].trellis) + size_t(e) * per;
    if (contiguous) {
      be.upload(dst, ls[0].trellis, per * size_t(n_));  // one stacked file tensor: one copy
    } else {
      for (int e = 0; e < n_; ++e) be.upload(dst + size_t(e) * per, ls[size_t(e)].trellis, per);
    }
    std::vector<float> suh, svh, bias;
    bool any_bias = false;
    for (const Layout& l : ls) any_bias = any_bias || !l.bias.empty();
    for (const Layout& l : ls) {
      suh.insert(suh.end(), l.suh.begin(), l.suh.end());
      svh.insert(svh.end(), l.svh.begin(), l.svh.end());
      if (any_bias) {
        if (l.bias.empty()) bias.resize(bias.size() + size_t(l.out_features), 0.0f);
        else bias.insert(bias.end(), l.bias.begin(), l.bias.end());
      }
    }
    suh_ = upload_floats(be, suh);
    svh_ = upload_floats(be, svh);
    if (any_bias) bias_ = upload_floats(be, bias);
    const kcuda::DeviceWeights w = device_weights();
    Arena::reserve_all(kcuda::gather_workspace_bytes(w, kArenaGatherRows, 1),
                         kcuda::gather_counters(w, kArenaGatherRows, 1), cuda::stream());
  }

  int n_experts() const override { return n_; }
  int64_t rows() const override { return first_.out_features; }
  int64_t cols() const override { return first_.in_features; }
  std::string type_name() const override { return type_of(first_); }
  size_t bytes() const override { return bytes_; }

  void gather_matmul(const Tensor& x, const int32_t* ids, int k, const Tensor& y) const override {
    gather(x, ids, k, y, Epilogue::None);
  }
  bool gather_matmul_fused(const Tensor& x, const int32_t* ids, int k, const Tensor& y, Epilogue ep) const override {
    gather(x, ids, k, y, ep);
    return true;
  }

 private:
  void gather(const Tensor& x, const int32_t* ids, int k, const Tensor& y, Epilogue ep) const {
    if (k < 1) fail("gather_matmul: experts '", first_.name, "' …: k must be positive, found ", k);
    check_f32_rows("gather_matmul", first_.name, x, x.rows, cols());
    check_f32_rows("gather_matmul", first_.name, y, x.rows * k, rows());
    if (y.rows == 0) return;
    if (!ids) fail("gather_matmul: experts '", first_.name, "' …: ids are null");
    kcuda::DeviceWeights w = device_weights();
    w.epilogue = int(ep);
    const size_t bytes = kcuda::gather_workspace_bytes(w, y.rows, k), counters = kcuda::gather_counters(w, y.rows, k);
    void* ws = nullptr;
    unsigned* ctr = nullptr;
    if (y.rows <= kArenaGatherRows && Arena::get().lease(bytes, counters, cuda::stream(), &ws, &ctr)) {
      kcuda::launch_gather_matmul(w, x.f32(), ids, k, y.rows, y.f32(), ws, ctr, cuda::stream());
      return;
    }
    Scratch s(bytes, counters);
    kcuda::launch_gather_matmul(w, x.f32(), ids, k, y.rows, y.f32(), s.get(), s.counters(), cuda::stream());
  }

  kcuda::DeviceWeights device_weights() const {
    return device_weights_of(first_, *trellis_, *suh_, *svh_, bias_.get(), n_);
  }

  int n_ = 0;
  Layout first_;  // shape, K and codebook of every expert (no data)
  size_t bytes_ = 0;
  std::unique_ptr<Buffer> trellis_, suh_, svh_, bias_;
};

}  // namespace

std::unique_ptr<QuantizedTensor> load_exl3_cuda(const TensorGroup& group, Backend& backend) {
  return std::make_unique<Exl3CudaTensor>(group, backend);
}

std::unique_ptr<ExpertSet> load_exl3_experts_cuda(const std::vector<TensorGroup>& groups, Backend& backend) {
  return std::make_unique<Exl3CudaExperts>(groups, backend);
}

}  // namespace tandem::exl3
