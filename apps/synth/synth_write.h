// Writing synthetic models to disk, streamed through the mix's Writer (tandem/writer.h): a GGUF file in
// llama.cpp's names, keys and types (gguf-iq2; the gguf writer describes the ModelDesc in its keys), or
// an HF folder (bf16, exl3-2 and nvfp4: config.json, model-0000i-of-0000n.safetensors shards and
// model.safetensors.index.json). Tensor bytes are made in chunks as they are written, so memory stays
// at a chunk per thread whatever the model's size. Every tensor gets its own random numbers.
// Owner: the caller owns the plan. Thread: one caller (generation fans out over the core's worker
// threads). Sync: files are complete when the call returns.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "synth_plan.h"
#include "tandem/writer.h"

namespace tandem::synth {

// Called with (bytes written, bytes in all) now and then.
using Progress = std::function<void(size_t, size_t)>;

// The vocabulary a gguf-iq2 file carries: byte-level BPE of the model's size (1000 special tokens, the
// 256 bytes, then fillers).
Vocabulary synthetic_vocabulary(const ModelDesc& desc);

// config.json of an HF mix: the model's config, plus exllamav3's quantization_config for exl3-2, or
// ModelOpt's (MIXED_PRECISION with quantized_layers and ignore) for nvfp4.
std::string plan_config_json(const Plan& plan);

void write_gguf(const Plan& plan, const std::string& path, uint64_t seed, const Progress& progress = {});

// Shards hold at most `shard_bytes` of tensor data (HF's default is 5 GB); a bigger tensor gets one alone.
void write_hf_folder(const Plan& plan, const std::string& dir, uint64_t seed, size_t shard_bytes = 5000000000,
                     const Progress& progress = {});

}  // namespace tandem::synth
