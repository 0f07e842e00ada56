// tokenizer.json: the text of a tokenizer.json, then (after a NUL) a tokenizer_config.json, through
// text/tokenizer's loader; a tokenizer that loads encodes and decodes a fixed text and every id.
#include "fuzz_util.h"
#include "tandem/text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tandem::fuzz::run_one([&] {
    auto [json, config] = tandem::fuzz::split_at_nul(data, size);
    auto t = tandem::Tokenizer::from_json(json, config, "fuzz/tokenizer.json");
    t.decode(t.encode("Hello, world! 1234 héllo 日本 <|im_end|>\n\n  x", true, true));
    std::vector<int32_t> all;
    for (int32_t id = 0; id < t.vocab_size() && id < 4096; ++id) all.push_back(id);
    t.decode(all, true);
    t.decode(all, false);
  });
}
