// safetensors: the bytes of one .safetensors file through the container reader
// (formats/safetensors/safetensors_file: header length, JSON header, dtypes, shapes, offsets), then
// every dense group loaded, dequantized and multiplied by the safetensors format.
#include "formats/safetensors/safetensors_file.h"
#include "formats/safetensors/safetensors_format.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tandem::fuzz::run_one([&] {
    // An exact-size heap copy: ASan sees any read past the end (libFuzzer's own buffer is one too).
    std::vector<uint8_t> bytes(data, data + size);
    auto tensors = tandem::safetensors::parse_file(bytes.data(), bytes.size(), "fuzz.safetensors");
    tandem::fuzz::load_all(tensors, tandem::safetensors::SafetensorsFormat());
  });
}
