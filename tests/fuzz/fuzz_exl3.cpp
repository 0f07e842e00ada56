// EXL3: an in-memory safetensors file whose groups (trellis, suh/su, svh/sv, bias, mcg/mul1 markers)
// are probed and parsed by formats/exl3 (parse_group's layout checks), then decoded and multiplied.
#include "formats/exl3/exl3_format.h"
#include "formats/safetensors/safetensors_file.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tandem::fuzz::run_one([&] {
    std::vector<uint8_t> bytes(data, data + size);
    auto tensors = tandem::safetensors::parse_file(bytes.data(), bytes.size(), "fuzz.safetensors");
    tandem::fuzz::load_all(tensors, tandem::exl3::Exl3Format());
  });
}
