// MLX: a folder of config.json (the input's text after its selector byte) and one safetensors file
// (the bytes after the NUL). Runs the probe, the open (the quantization block, the mapped file's
// header, every quantized module transcoded to GGML blocks, stacked experts split), the dump, and the
// tensors it presents loaded by the gguf format as a model load would: dequantized and multiplied
// (formats/mlx: mlx_checkpoint, mlx_files, mlx_repack). The selector is unused (kept for the shared
// input layout of fuzz_folder.h).
#include "formats/gguf/gguf_format.h"
#include "formats/mlx/mlx_format.h"
#include "fuzz_folder.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tandem::fuzz::FuzzFolder folder;
  const auto in = tandem::fuzz::config_and_file(data, size);
  const std::string& dir = folder.write({{"config.json", in.config}, {"model.safetensors", in.file}});
  return tandem::fuzz::run_one([&] {
    const tandem::mlx::MlxFormat format;
    format.probe_path(dir);
    auto ckpt = format.open(dir);
    ckpt->dump();
    tandem::fuzz::load_all(ckpt->tensors(), tandem::gguf::GgufFormat());
  });
}
