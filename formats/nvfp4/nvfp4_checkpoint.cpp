// Opening ModelOpt checkpoints (nvfp4_checkpoint.h).
#include "formats/nvfp4/nvfp4_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include <spdlog/spdlog.h>

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

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

const char* const kWrapperText = "language_model.";

// The parts a text-only loader leaves out, by prefix after the wrapper's `language_model.` is
// dropped (the MTP head lives inside the language model: `language_model.mtp.*`), or as stored (the
// vision tower, projector and audio encoder sit beside it). Names from vLLM's nano_nemotron_vl.py
// and nemotron_h_mtp.py load_weights.
struct PartRule {
  const char* what;
  const char* prefix;
  bool inside_text;  // matched after `language_model.` is dropped
  const char* note;
};
const PartRule kParts[] = {
    {"MTP layer", "mtp.", true, "not used yet"},
    {"vision tower and projector", "vision_model.", false, "tandem reads text only"},
    {"vision tower and projector", "mlp1.", false, "tandem reads text only"},
    {"audio encoder", "sound_encoder.", false, "tandem reads text only"},
};

}  // namespace

ModeloptCheckpoint::ModeloptCheckpoint(std::unique_ptr<Checkpoint> inner, QuantConfig config)
    : inner_(std::move(inner)), config_(std::move(config)) {
  const std::vector<RawTensor>& all = inner_->tensors();
  for (const RawTensor& t : all)
    if (starts_with(t.name, kWrapperText)) text_prefix_ = kWrapperText;
  std::map<std::string, size_t> part_of;  // "what" → index in skipped_
  for (const RawTensor& t : all) {
    std::string name = t.name;
    const bool in_text = !text_prefix_.empty() && starts_with(name, text_prefix_);
    if (in_text) name = name.substr(text_prefix_.size());
    const PartRule* rule = nullptr;
    for (const PartRule& r : kParts)
      if ((r.inside_text ? in_text || text_prefix_.empty() : !in_text) && starts_with(name, r.prefix)) {
        rule = &r;
        break;
      }
    if (rule) {
      auto [it, fresh] = part_of.emplace(rule->what, skipped_.size());
      if (fresh) skipped_.push_back({rule->what, {}, 0, 0});
      SkippedPart& p = skipped_[it->second];
      const std::string stored = (in_text ? text_prefix_ : "") + rule->prefix;
      if (std::find(p.prefixes.begin(), p.prefixes.end(), stored) == p.prefixes.end()) p.prefixes.push_back(stored);
      ++p.tensors, p.bytes += t.nbytes;
      continue;
    }
    check(text_prefix_.empty() || in_text, "nvfp4: '", printable(t.file), "': tensor '", printable(t.name),
          "' is outside the vision-language wrapper's parts (", kWrapperText, "*, vision_model.*, mlp1.*, ",
          "sound_encoder.*)");
    RawTensor r = t;
    r.name = name;
    by_name_[r.name] = tensors_.size();
    tensors_.push_back(std::move(r));
  }
  for (const SkippedPart& p : skipped_) {
    const char* note = "";
    for (const PartRule& r : kParts)
      if (p.what == r.what) note = r.note;
    spdlog::info("nvfp4: '{}': {} present: {} tensors skipped ({})", inner_->path(), p.what, p.tensors, note);
  }
}

const RawTensor* ModeloptCheckpoint::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

std::string ModeloptCheckpoint::dump() const {
  int counts[3] = {0, 0, 0};
  for (const RawTensor& t : inner_->tensors())
    if (ends_with(t.name, ".weight"))
      if (auto s = stored_as(t)) ++counts[int(*s)];
  std::ostringstream o;
  o << "ModelOpt quant_algo " << config_.quant_algo << " (" << config_.file << "): " << counts[int(Storage::NVFP4)]
    << " NVFP4, " << counts[int(Storage::FP8)] << " FP8 and " << counts[int(Storage::Dense)] << " dense weights; "
    << config_.exclude.size() << " exclude patterns";
  if (!config_.kv_cache_quant_algo.empty())
    o << "; KV cache " << config_.kv_cache_quant_algo << " (its k_scale/v_scale are not used: tandem keeps the cache in f32/bf16)";
  o << "\n";
  if (!text_prefix_.empty())
    o << "vision-language wrapper: the text model is read from " << text_prefix_ << "* (" << tensors_.size()
      << " tensors, named without the prefix)\n";
  for (const SkippedPart& p : skipped_) {
    o << "skipped: " << p.what << " (";
    for (size_t i = 0; i < p.prefixes.size(); ++i) o << (i ? ", " : "") << p.prefixes[i] << "*";
    o << "): " << p.tensors << " tensors, " << p.bytes << " bytes\n";
  }
  o << inner_->dump();
  return o.str();
}

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
