// Streaming synthetic models through the mix's Writer: one GGUF file, or an HF folder of shards, an
// index and config.json.
#include "synth_write.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "synth_data.h"
#include "synth_model.h"
#include "tandem/error.h"
#include "tandem/text/tokenizer.h"

namespace tandem::synth {
namespace {

constexpr size_t kChunkBytes = size_t(64) << 20;
constexpr int kSpecialTokens = 1000;

// Streams the rows of plan.tensors[i] into the file, a chunk at a time.
void write_tensor(const Plan& plan, size_t i, uint64_t seed, TensorFile& f, std::vector<uint8_t>& buf, size_t& done,
                  const Progress& progress) {
  const StoredTensor& t = plan.tensors[i];
  const int64_t chunk_rows = std::max<int64_t>(1, int64_t(kChunkBytes / std::max<size_t>(t.row_bytes, 1)));
  for (int64_t r0 = 0; r0 < t.rows; r0 += chunk_rows) {
    const int64_t r1 = std::min(t.rows, r0 + chunk_rows);
    buf.resize(size_t(r1 - r0) * t.row_bytes);
    generate_rows_parallel(plan, t, stream_id(seed, i), r0, r1, buf.data());
    f.write(buf.data(), buf.size());
    done += buf.size();
    if (progress) progress(done, plan.totals.bytes);
  }
}

}  // namespace

Vocabulary synthetic_vocabulary(const ModelDesc& d) {
  check(d.vocab >= kSpecialTokens + 256, "synth: a vocabulary of ", d.vocab, " tokens is too small for ",
        kSpecialTokens, " special tokens and 256 bytes");
  Vocabulary v;
  std::vector<std::string>& tokens = v.tokens;
  std::vector<Vocabulary::Kind>& types = v.kinds;
  for (int i = 0; i < d.vocab; ++i) {
    if (i < kSpecialTokens) {
      const char* named[] = {"<unk>", "<s>", "</s>"};
      std::string special = "<SPECIAL_";
      special += std::to_string(i);
      special += ">";
      tokens.push_back(i < 3 ? named[i] : i == 10 ? "<|im_start|>" : i == 11 ? "<|im_end|>" : special);
      types.push_back(i == 0 ? Vocabulary::Kind::Unknown : Vocabulary::Kind::Control);
    } else if (i < kSpecialTokens + 256) {
      tokens.push_back(byte_level_symbol(i - kSpecialTokens));
      types.push_back(Vocabulary::Kind::Normal);
    } else {
      tokens.push_back(std::to_string(i));
      tokens.back().insert(tokens.back().begin(), 'w');
      types.push_back(Vocabulary::Kind::Normal);
    }
  }
  v.bos = 1, v.eos = 2, v.unknown = 0, v.padding = 0, v.add_bos = false;
  return v;
}

std::string plan_config_json(const Plan& plan) {
  std::string cfg = config_json(plan.desc);
  if (plan.mix == Mix::Nvfp4) {
    // config.json's form (spec/formats.md § 6.3 item 2, MIXED_PRECISION of item 3): every quantized
    // module in quantized_layers with its algo, the dense linears named by ignore as ModelOpt does.
    const size_t end = cfg.rfind('}');
    check(end != std::string::npos, "synth: config.json text has no closing brace");
    std::string layers;
    for (const StoredTensor& t : plan.tensors) {
      if (t.modelopt_part != StoredTensor::kNvfp4Weight && t.modelopt_part != StoredTensor::kFp8Weight) continue;
      layers += layers.empty() ? "\n" : ",\n";
      layers += "      \"" + t.name.substr(0, t.name.size() - std::string(".weight").size()) + "\": {\"quant_algo\": ";
      layers += t.modelopt_part == StoredTensor::kNvfp4Weight ? "\"NVFP4\", \"group_size\": 16}" : "\"FP8\"}";
    }
    return cfg.substr(0, end) +
           ",\n  \"quantization_config\": {\"quant_method\": \"modelopt\", \"quant_algo\": \"MIXED_PRECISION\", "
           "\"producer\": {\"name\": \"modelopt\", \"version\": \"tandem-synth\"}, "
           "\"ignore\": [\"lm_head\", \"backbone.embeddings\", \"*.mixer.gate\", \"*.mixer.conv1d\", \"*norm*\"], "
           "\"kv_cache_quant_algo\": null, \"quantized_layers\": {" + layers + "\n  }}\n}";
  }
  if (plan.mix != Mix::Exl3_2) return cfg;
  // As exllamav3 writes it (spec/formats.md § 5.2); the loader infers format, K and codebook from the
  // tensors themselves.
  const size_t end = cfg.rfind('}');
  check(end != std::string::npos, "synth: config.json text has no closing brace");
  return cfg.substr(0, end) +
         ", \"quantization_config\": {\"quant_method\": \"exl3\", \"version\": \"0.0.0\", \"bits\": 2.0, "
         "\"head_bits\": 6, \"calibration\": {\"rows\": 0, \"cols\": 0}, \"out_scales\": \"never\", "
         "\"codebook\": \"mul1\"}}";
}

void write_gguf(const Plan& plan, const std::string& path, uint64_t seed, const Progress& progress) {
  check(is_gguf(plan.mix), "synth: write_gguf needs a GGUF mix (gguf-iq2, gguf-TYPE), found ", plan.mix_label);
  std::vector<TensorSpec> layout;
  for (const StoredTensor& t : plan.tensors) layout.push_back({t.name, t.dtype, t.shape});
  const Vocabulary vocab = synthetic_vocabulary(plan.desc);
  FileInfo info;
  info.name = "tandem synthetic model (random weights)";
  info.model = &plan.desc;
  info.vocab = &vocab;
  auto f = plan.writer->create(path, layout, info);
  std::vector<uint8_t> buf;
  size_t done = 0;
  for (size_t i = 0; i < plan.tensors.size(); ++i) write_tensor(plan, i, seed, *f, buf, done, progress);
  f->close();
}

void write_hf_folder(const Plan& plan, const std::string& dir, uint64_t seed, size_t shard_bytes,
                     const Progress& progress) {
  check(!is_gguf(plan.mix), "synth: write_hf_folder needs an HF mix (bf16, exl3-2, nvfp4), found ", plan.mix_label);
  std::filesystem::create_directories(dir);
  // Shards in tensor order, each up to shard_bytes.
  std::vector<std::vector<size_t>> shards(1);
  size_t bytes = 0;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    if (bytes > 0 && bytes + plan.tensors[i].nbytes > shard_bytes) shards.emplace_back(), bytes = 0;
    shards.back().push_back(i);
    bytes += plan.tensors[i].nbytes;
  }
  std::vector<std::pair<std::string, std::string>> weight_map;
  std::vector<uint8_t> buf;
  size_t done = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    std::vector<TensorSpec> layout;
    for (size_t i : shards[s]) {
      const StoredTensor& t = plan.tensors[i];
      layout.push_back({t.name, t.dtype, t.shape});
      weight_map.emplace_back(t.name, name);
    }
    auto f = plan.writer->create((std::filesystem::path(dir) / name).string(), layout);
    for (size_t i : shards[s]) write_tensor(plan, i, seed, *f, buf, done, progress);
    f->close();
  }
  plan.writer->write_index((std::filesystem::path(dir) / "model.safetensors.index.json").string(), weight_map);
  std::ofstream cfg(std::filesystem::path(dir) / "config.json", std::ios::trunc);
  cfg << plan_config_json(plan) << "\n";
  cfg.close();
  check(bool(cfg), "synth: cannot write '", (std::filesystem::path(dir) / "config.json").string(), "'");
}

}  // namespace tandem::synth
