// Real vocabularies for tests: ../shared/data/vocab/ggml-vocab-<name>.gguf through the GGUF plugin's
// reader and its synthesized tokenizer.json / tokenizer_config.json, each loaded once per process.
#pragma once
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>

#include "formats/gguf/gguf_file.h"
#include "formats/gguf/gguf_tokenizer.h"
#include "tandem/text/tokenizer.h"
#include "test_util.h"

namespace tandem::test {

inline std::string vocab_path(const std::string& name) { return test::shared_data("vocab/ggml-vocab-" + name + ".gguf"); }

// The GGUF plugin's synthesized side files, read with its GGUF reader (the vocabulary files are not
// Nemotron models, so the checkpoint itself may refuse them; see test_vocab.cpp, VocabPlugin). Loaded once.
inline const Tokenizer& vocab(const std::string& name) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    auto file = gguf::GgufFile::open(vocab_path(name));
    auto json = gguf::tokenizer_json(file->metadata());
    auto config = gguf::tokenizer_config_json(file->metadata());
    if (!json) throw std::runtime_error(name + ": no tokenizer.json");
    it = cache.emplace(name, Tokenizer::from_json(*json, config.value_or(""), name)).first;
  }
  return it->second;
}

}  // namespace tandem::test
