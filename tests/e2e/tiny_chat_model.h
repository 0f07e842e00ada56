// A tiny random nemotron_h chat model with a real tokenizer, written at test time (never committed):
// safetensors weights (vocab 288: 32 special and chat-format tokens, then the 256 byte tokens of a
// byte-level BPE without merges), tokenizer.json, tokenizer_config.json carrying the Nemotron 3 chat
// template, and a YAML profile that serves it. Random weights make random text, but every byte of
// it goes through the real tokenizer, template, parser and constraints.
// Owner: free functions. Thread: any. Sync: none (writes files).
#pragma once
#include <cstdint>
#include <string>

namespace tandem::test {

struct TinyChatModel {
  std::string dir;      // the model folder
  std::string profile;  // <dir>.yaml, next to the folder
};

// Writes the model into `dir` (an existing folder is replaced) and its profile beside it. Every input
// is checked first, and everything is written under temporary names renamed at the end, so a
// failure leaves neither `dir` nor the profile behind.
// `chat_template_path`: the Jinja file to ship (NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja).
// `api_key`: the profile's server.api_key; empty writes none (the server then needs no key).
// Deterministic: the same seed writes the same bytes.
TinyChatModel write_tiny_chat_model(const std::string& dir, const std::string& chat_template_path,
                                    const std::string& api_key = "", uint64_t seed = 20251129);

// Token ids of the tokenizer it writes.
inline constexpr int kTinyChatVocab = 288;
inline constexpr int32_t kTinyBos = 1, kTinyEos = 2, kTinyImStart = 10, kTinyImEnd = 11, kTinyThink = 12,
                         kTinyThinkEnd = 13, kTinyToolCall = 14, kTinyToolCallEnd = 15, kTinyFirstByte = 32;

}  // namespace tandem::test
