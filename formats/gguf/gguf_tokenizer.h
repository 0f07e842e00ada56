// HF tokenizer side files synthesized from GGUF tokenizer.* metadata (spec/formats.md § 2.5), so that
// the core's tokenizer and chat template read GGUF and HF checkpoints the same way.
// Owner: returns text. Thread: any. Sync: none.
#pragma once
#include <optional>
#include <string>

#include "gguf_metadata.h"

namespace tandem::gguf {

// tokenizer.json: a BPE model with vocab and merges, added_tokens for CONTROL (special) and
// USER_DEFINED tokens, a ByteLevel decoder, and the ggml pre-tokenizer name kept as
// "pre_tokenizer": {"type": "ggml", "name": <tokenizer.ggml.pre>}. nullopt without
// tokenizer.ggml.tokens; an error naming the key for a tokenizer model other than gpt2 (byte-level
// BPE) or token_type / merges of the wrong shape.
std::optional<std::string> tokenizer_json(const Metadata& metadata);

// tokenizer_config.json: chat_template, bos/eos/unk/pad token texts, add_bos_token, add_eos_token.
// nullopt when the file has neither tokens nor a chat template.
std::optional<std::string> tokenizer_config_json(const Metadata& metadata);

}  // namespace tandem::gguf
