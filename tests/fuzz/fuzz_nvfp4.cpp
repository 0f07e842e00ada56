// NVFP4 (ModelOpt): a folder of one safetensors file and its quantization config, the config being
// hf_quant_config.json (selector bit 0 set) or config.json's quantization_config (clear; bit 1 also
// writes a config.json beside the legacy file). Runs the config reader, the probe, the open (the
// tensors held to the config), the dump, and every group probed, parsed, loaded, dequantized and
// multiplied (formats/nvfp4: modelopt_config, nvfp4_checkpoint, nvfp4_cpu).
#include "formats/nvfp4/modelopt_config.h"
#include "formats/nvfp4/nvfp4_format.h"
#include "fuzz_folder.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tandem::fuzz::FuzzFolder folder;
  const auto in = tandem::fuzz::config_and_file(data, size);
  std::vector<std::pair<std::string, std::string>> files = {{"model.safetensors", in.file}};
  if (in.selector & 1) {
    files.push_back({"hf_quant_config.json", in.config});
    if (in.selector & 2) files.push_back({"config.json", "{\"architectures\": [\"NemotronHForCausalLM\"]}"});
  } else {
    files.push_back({"config.json", in.config});
  }
  const std::string& dir = folder.write(files);
  return tandem::fuzz::run_one([&] {
    using namespace tandem::nvfp4;
    has_modelopt_config(dir);
    if (auto c = read_quant_config(dir)) {
      c->excluded_by("backbone.layers.0.mixer.in_proj");
      if (!c->mixed()) c->uniform();
    }
    const Nvfp4Format format;
    format.probe_path(dir);
    auto ckpt = format.open(dir);
    ckpt->dump();
    tandem::fuzz::load_all(ckpt->tensors(), format);
  });
}
