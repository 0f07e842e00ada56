// GGUF: the bytes of a .gguf file through everything a load does with one — the container
// (formats/gguf/gguf_file), the checkpoint's names, config.json and tokenizer side files (parsed by
// the core and the tokenizer as a model load would), the dump, and every tensor group loaded.
#include "formats/gguf/gguf_checkpoint.h"
#include "formats/gguf/gguf_format.h"
#include "fuzz_util.h"
#include "tandem/model_config.h"
#include "tandem/text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tandem::fuzz::run_one([&] {
    using namespace tandem::gguf;
    GgufCheckpoint c(GgufFile::from_bytes(std::vector<uint8_t>(data, data + size), "fuzz.gguf"));
    tandem::parse_model_config(c.config_json(), "fuzz.gguf (config)");
    c.dump();
    if (auto tok = c.side_file("tokenizer.json")) {
      auto t = tandem::Tokenizer::from_json(*tok, c.side_file("tokenizer_config.json").value_or(""), "fuzz.gguf");
      t.decode(t.encode("Hello, world! 123 <think>", true, true));
    }
    tandem::fuzz::load_all(c.tensors(), GgufFormat());
  });
}
