// `tandem inspect`: the checkpoint's listing, or with --tensor one weight loaded alone on the CPU
// backend through the format that claims it (tandem::load_tensor) and, with --dequantize, its decoded
// float32 matrix as .npy, so any tensor can be checked against another tool's dequantizer.
#include "cmd_inspect.h"

#include <cstdio>

#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/npy.h"
#include "tandem/registry.h"
#include "tandem/weights.h"

namespace tandem::cli {

const CommandSpec& inspect_spec() {
  static const CommandSpec spec{
      "inspect", "Print the checkpoint's metadata and tensor table, or decode one tensor (--tensor).",
      with_model_flags({
          {"tensor", "NAME", "one weight: an EXL3 linear's prefix, a GGUF or safetensors tensor's name"},
          {"dequantize", "OUT.npy", "write that weight decoded to float32, [rows, cols] (needs --tensor)"},
      }),
      "",
      "GGUF tensors go by the names tandem gives them (backbone.layers.N...., as the HF checkpoint's);\n"
      "--model takes a model folder or a bare .gguf / .safetensors file."};
  return spec;
}

int cmd_inspect(const std::vector<std::string>& argv) {
  Args a(argv, inspect_spec());
  Profile p = resolve_profile(a);
  check(!a.has("dequantize") || a.has("tensor"), "tandem inspect: --dequantize needs --tensor NAME");
  PluginRegistry reg;
  reg.load_default();
  if (!a.has("tensor")) {
    std::fputs(open_checkpoint(p.load, reg)->dump().c_str(), stdout);
    return 0;
  }
  // The CPU backend decodes every format; the checkpoint is only mapped, and only this group is loaded.
  p.load.device = "cpu";
  auto ckpt = open_checkpoint(p.load, reg);
  auto backend = reg.backend("cpu");
  std::string format;
  auto t = load_tensor(*ckpt, a.str("tensor"), reg, *backend, &format);
  std::vector<int64_t> shape = t->shape();
  std::string dims;
  for (int64_t d : shape) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  std::printf("%s: %s [%s], %zu bytes, format %s\n", a.str("tensor").c_str(), t->type_name().c_str(), dims.c_str(),
              t->bytes(), format.c_str());
  if (a.has("dequantize")) {
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    std::vector<float> w(n);
    t->dequantize(w.data());
    write_npy(a.str("dequantize"), w.data(), shape);
    std::fprintf(stderr, "wrote %s\n", a.str("dequantize").c_str());
  }
  return 0;
}

}  // namespace tandem::cli
