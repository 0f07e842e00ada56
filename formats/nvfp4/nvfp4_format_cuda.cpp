// The CUDA route of ModelOpt linears: host-side repack, then the GGUF CUDA tensors (nvfp4_format_cuda.h).
#include "formats/nvfp4/nvfp4_format_cuda.h"

#include <cstring>

#include "formats/gguf/gguf_format_cuda.h"
#include "formats/gguf/quant.h"
#include "formats/nvfp4/nvfp4_cpu.h"
#include "formats/nvfp4/repack.h"
#include "tandem/error.h"

namespace tandem::nvfp4 {
namespace {

// One weight in a form the GGUF CUDA loader takes: its bytes (kept here until the upload is done) and
// the RawTensors that describe them.
struct Staged {
  std::vector<uint8_t> bytes;
  float scale = 1.0f;
  RawTensor weight, scale_tensor;
  bool has_scale = false;
  const gguf::QuantType* type = nullptr;
};

const gguf::QuantType& gguf_type(const char* name) {
  const gguf::QuantType* t = gguf::find_type(name);
  check(t != nullptr, "nvfp4 (cuda): the GGUF kernels lack type ", name);
  return *t;
}

void stage(const Layout& l, Staged& s) {
  const std::vector<int64_t> shape = {l.out, l.in};
  const char* dtype;
  if (l.storage == Storage::NVFP4) {
    s.bytes = repack_gguf_nvfp4(l);
    dtype = "NVFP4";
    s.scale = l.global_scale;
    s.has_scale = true;
  } else if (!l.per_row) {
    const std::vector<uint16_t> b = fp8_to_bf16(l);
    s.bytes.resize(b.size() * 2);
    std::memcpy(s.bytes.data(), b.data(), s.bytes.size());
    dtype = "BF16";
    s.scale = l.global_scale;
    s.has_scale = true;
  } else {
    // Per-row scales have no output-factor form in the dense kernels: the exact product per value.
    std::vector<float> w(size_t(l.out * l.in));
    for (int64_t r = 0; r < l.out; ++r) {
      float* row = w.data() + r * l.in;
      decode_row(l, r, row);
      for (int64_t k = 0; k < l.in; ++k) row[k] *= l.out_scale[size_t(r)];
    }
    s.bytes.resize(w.size() * 4);
    std::memcpy(s.bytes.data(), w.data(), s.bytes.size());
    dtype = "F32";
  }
  s.type = &gguf_type(dtype);
  s.weight = RawTensor{l.name + ".weight", dtype, shape, s.bytes.data(), s.bytes.size(), l.file};
  s.scale_tensor = RawTensor{l.name + ".weight_scale_2", "F32", {1}, reinterpret_cast<const uint8_t*>(&s.scale), 4, l.file};
}

}  // namespace

std::unique_ptr<QuantizedTensor> load_modelopt_cuda(const TensorGroup& group, Backend& backend) {
  const Layout l = parse_group(group);
  Staged s;
  stage(l, s);
  auto t = gguf::load_gguf_cuda(s.weight, *s.type, s.has_scale ? &s.scale_tensor : nullptr, backend);
  backend.synchronize();  // the staged bytes die with this frame
  return t;
}

std::unique_ptr<ExpertSet> load_modelopt_experts_cuda(const std::vector<TensorGroup>& groups, Backend& backend) {
  check(!groups.empty(), "nvfp4 (cuda): an expert set needs at least one expert");
  std::vector<Staged> staged(groups.size());
  std::vector<const RawTensor*> weights, scales;
  Layout first;
  for (size_t e = 0; e < groups.size(); ++e) {
    const Layout l = parse_group(groups[e]);
    if (e == 0) first = l;
    if (l.storage != first.storage || l.per_row != first.per_row || l.out != first.out || l.in != first.in)
      fail("nvfp4 (cuda): expert '", l.name, "' in '", l.file, "' is ", storage_name(l.storage), " [", l.out, ", ",
           l.in, "], expected ", storage_name(first.storage), " [", first.out, ", ", first.in, "] like '", first.name,
           "' (one layer's experts must share one form on the GPU)");
    stage(l, staged[e]);
  }
  for (Staged& s : staged) {
    weights.push_back(&s.weight);
    scales.push_back(s.has_scale ? &s.scale_tensor : nullptr);
  }
  auto set = gguf::load_gguf_experts_cuda(weights, scales, backend);
  backend.synchronize();
  return set;
}

}  // namespace tandem::nvfp4
