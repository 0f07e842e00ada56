// Opening ModelOpt checkpoints (nvfp4_checkpoint.h).
#include "formats/nvfp4/nvfp4_checkpoint.h"

#include <filesystem>
#include <sstream>

#include "formats/safetensors/safetensors_checkpoint.h"
#include "tandem/error.h"

namespace tandem::nvfp4 {
namespace fs = std::filesystem;
namespace {

fs::path folder_of(const std::string& path) {
  std::error_code ec;
  fs::path p(path);
  if (fs::is_directory(p, ec)) return p;
  return p.has_parent_path() ? p.parent_path() : fs::path(".");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class ModeloptCheckpoint final : public Checkpoint {
 public:
  ModeloptCheckpoint(std::unique_ptr<Checkpoint> inner, QuantConfig config)
      : inner_(std::move(inner)), config_(std::move(config)) {}
  std::string path() const override { return inner_->path(); }
  std::string config_json() const override { return inner_->config_json(); }
  const std::vector<RawTensor>& tensors() const override { return inner_->tensors(); }
  const RawTensor* find(const std::string& name) const override { return inner_->find(name); }
  std::optional<std::string> side_file(const std::string& name) const override { return inner_->side_file(name); }
  std::string dump() const override {
    int counts[3] = {0, 0, 0};
    for (const RawTensor& t : tensors())
      if (ends_with(t.name, ".weight"))
        if (auto s = stored_as(t)) ++counts[int(*s)];
    std::ostringstream o;
    o << "ModelOpt quant_algo " << config_.quant_algo << " (" << config_.file << "): " << counts[int(Storage::NVFP4)]
      << " NVFP4, " << counts[int(Storage::FP8)] << " FP8 and " << counts[int(Storage::Dense)] << " dense weights; "
      << config_.exclude.size() << " exclude patterns";
    if (!config_.kv_cache_quant_algo.empty())
      o << "; KV cache " << config_.kv_cache_quant_algo << " (its k_scale/v_scale are not used: tandem keeps the cache in f32/bf16)";
    o << "\n" << inner_->dump();
    return o.str();
  }

 private:
  std::unique_ptr<Checkpoint> inner_;
  QuantConfig config_;
};

}  // namespace

int probe_modelopt_path(const std::string& path) {
  if (safetensors::probe_checkpoint(path) == 0) return 0;
  return has_modelopt_config(folder_of(path)) ? 110 : 0;
}

std::optional<Storage> stored_as(const RawTensor& w) {
  if (w.dtype == "U8") return Storage::NVFP4;
  if (w.dtype == "F8_E4M3") return Storage::FP8;
  if (w.dtype == "BF16" || w.dtype == "F16" || w.dtype == "F32") return Storage::Dense;
  return std::nullopt;
}

void check_against_config(const Checkpoint& ckpt, const QuantConfig& c) {
  for (const RawTensor& t : ckpt.tensors()) {
    if (!ends_with(t.name, ".weight")) continue;
    const std::optional<Storage> s = stored_as(t);
    if (!s) continue;
    const std::string module = t.name.substr(0, t.name.size() - 7);
    const std::string stored =
        std::string(storage_name(*s)) + " (" + t.dtype + " '" + printable(t.name) + "' in '" + t.file + "')";
    const std::string pattern = c.excluded_by(module);
    if (!pattern.empty()) {
      if (*s != Storage::Dense)
        fail("nvfp4: ", c.file, " excludes module '", printable(module), "' (pattern '", printable(pattern),
             "'), but it is stored as ", stored);
      continue;
    }
    if (c.mixed()) {
      auto it = c.layers.find(module);
      if (it == c.layers.end()) {
        if (*s != Storage::Dense)
          fail("nvfp4: ", c.file, ": module '", printable(module), "' is stored as ", stored,
               ", but quantized_layers does not list it");
      } else if (it->second != *s) {
        fail("nvfp4: ", c.file, ": quantized_layers lists module '", printable(module), "' as ",
             storage_name(it->second), ", but it is stored as ", stored);
      }
    } else if (*s != Storage::Dense && *s != c.uniform()) {
      fail("nvfp4: ", c.file, ": quant_algo ", printable(c.quant_algo), ", but module '", printable(module),
           "' is stored as ", stored);
    }
  }
}

std::unique_ptr<Checkpoint> open_modelopt(const std::string& path) {
  std::optional<QuantConfig> config = read_quant_config(folder_of(path));
  check(config.has_value(), "nvfp4: '", path, "' has neither hf_quant_config.json nor a config.json whose ",
        "quantization_config says quant_method modelopt");
  std::unique_ptr<Checkpoint> inner = safetensors::open_checkpoint(path);
  check_against_config(*inner, *config);
  return std::make_unique<ModeloptCheckpoint>(std::move(inner), std::move(*config));
}

}  // namespace tandem::nvfp4
