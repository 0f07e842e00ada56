// Loading a Mamba2 layer's weights, shared by the CPU and CUDA mixers.
#include "mixer_weights.h"

#include <cmath>
#include <string>

#include "tandem/error.h"

namespace tandem::mamba2 {
namespace {

int64_t product(const std::vector<int64_t>& shape) {
  int64_t p = 1;
  for (int64_t s : shape) p *= s;
  return p;
}

}  // namespace

Mamba2Weights load_weights(const MambaDesc& desc, const Dims& dm, int hidden, WeightLoader& weights) {
  auto matrix = [&](const char* name, std::vector<int64_t> shape) {
    auto t = weights.tensor(name, shape);
    check(t && t->shape() == shape, "mamba2: weight '", weights.full_name(name), "' loaded as ",
          t ? shape_str(t->shape()) : std::string("nothing"), ", expected ", shape_str(shape));
    return t;
  };
  auto vec = [&](const char* name, std::vector<int64_t> shape) {
    std::vector<float> v = weights.vector(name, shape);
    check(int64_t(v.size()) == product(shape), "mamba2: weight '", weights.full_name(name), "' has ",
          v.size(), " values, expected ", product(shape), " for ", shape_str(shape));
    return v;
  };
  Mamba2Weights w;
  w.in_proj = matrix("in_proj", {dm.rows, hidden});
  w.out_proj = matrix("out_proj", {hidden, dm.d_in});
  if (desc.proj_bias) {
    w.in_bias = vec("in_proj.bias", {dm.rows});
    w.out_bias = vec("out_proj.bias", {hidden});
  }
  w.conv_w = vec("conv1d", {dm.conv_dim, dm.K});
  if (desc.conv_bias) w.conv_b = vec("conv1d.bias", {dm.conv_dim});
  w.dt_bias = vec("dt_bias", {dm.nh});
  w.d = vec("D", {dm.nh});
  if (weights.has("A_log")) {
    w.a = vec("A_log", {dm.nh});
    for (float& v : w.a) v = -std::exp(v);
  } else if (weights.has("A")) {  // GGUF stores A = −exp(A_log) already
    w.a = vec("A", {dm.nh});
  } else {
    fail("mamba2: weight '", weights.full_name("A_log"), "' is missing (and no '", weights.full_name("A"),
         "' either)");
  }
  w.norm = vec("norm", {dm.d_in});
  return w;
}

}  // namespace tandem::mamba2
