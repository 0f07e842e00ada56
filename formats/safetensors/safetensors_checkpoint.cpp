// Opening safetensors checkpoints: which files make up the checkpoint, and one name index over all
// of their tensors.
#include "safetensors_checkpoint.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "safetensors_file.h"
#include "tandem/error.h"

namespace tandem::safetensors {
namespace fs = std::filesystem;
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

std::vector<fs::path> safetensors_in(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (ends_with(it->path().filename().string(), ".safetensors") && is_file(it->path())) files.push_back(it->path());
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_text(const fs::path& p, const char* what) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail("safetensors: cannot read ", what, " '", p.string(), "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// tensor name → shard file name, as listed by the index.
std::map<std::string, std::string> read_weight_map(const fs::path& index) {
  const std::string at = "safetensors: index '" + index.string() + "': ";
  std::string text = read_text(index, "index");
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseIterativeFlag>(text.data(), text.size());
  check(!doc.HasParseError(), at, "not valid JSON: ", rapidjson::GetParseError_En(doc.GetParseError()), " at byte ",
        doc.GetErrorOffset());
  check(doc.IsObject(), at, "expected a JSON object");
  auto wm = doc.FindMember("weight_map");
  check(wm != doc.MemberEnd() && wm->value.IsObject(), at, "field 'weight_map' missing or not an object");
  std::map<std::string, std::string> out;
  for (const auto& m : wm->value.GetObject()) {
    std::string name(m.name.GetString(), m.name.GetStringLength());
    check(m.value.IsString(), at, "weight_map entry '", name, "' is not a file name string");
    std::string file(m.value.GetString(), m.value.GetStringLength());
    auto [it, fresh] = out.emplace(name, file);
    check(fresh || it->second == file, at, "weight_map lists tensor '", name, "' twice, in '", it->second,
          "' and '", file, "'");
  }
  return out;
}

class SafetensorsCheckpoint final : public Checkpoint {
 public:
  SafetensorsCheckpoint(std::string path, fs::path dir) : path_(std::move(path)), dir_(std::move(dir)) {}

  std::string path() const override { return path_; }

  std::string config_json() const override {
    fs::path p = dir_ / "config.json";
    check(is_file(p), "safetensors: folder '", dir_.string(), "' has no config.json (the model architecture)");
    return read_text(p, "config");
  }

  // HF folders keep tokenizer.json and friends beside the weights.
  std::optional<std::string> side_file(const std::string& name) const override {
    fs::path p = dir_ / name;
    if (!is_file(p)) return std::nullopt;
    return read_text(p, "side file");
  }

  const std::vector<RawTensor>& tensors() const override { return tensors_; }

  const RawTensor* find(const std::string& name) const override {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }

  // Maps and validates one file and adds its tensors.
  void add_file(const fs::path& file) {
    mappings_.push_back(std::make_unique<Mapping>(file.string()));
    const Mapping& m = *mappings_.back();
    for (RawTensor& t : parse_file(m.data(), m.size(), m.path())) {
      auto [it, fresh] = index_.emplace(t.name, tensors_.size());
      if (!fresh) fail("safetensors: tensor '", t.name, "' is in both '", tensors_[it->second].file, "' and '", t.file, "'");
      tensors_.push_back(std::move(t));
    }
  }

 private:
  std::string path_;
  fs::path dir_;
  std::vector<std::unique_ptr<Mapping>> mappings_;
  std::vector<RawTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

std::unique_ptr<Checkpoint> open_sharded(const std::string& path, const fs::path& index) {
  fs::path dir = index.has_parent_path() ? index.parent_path() : fs::path(".");
  auto ckpt = std::make_unique<SafetensorsCheckpoint>(path, dir);
  auto weight_map = read_weight_map(index);
  check(!weight_map.empty(), "safetensors: index '", index.string(), "': weight_map lists no tensors");
  std::map<std::string, std::string> first_tensor;  // shard → a tensor that names it, for messages
  for (const auto& [tensor, file] : weight_map) first_tensor.emplace(file, tensor);
  for (const auto& [file, tensor] : first_tensor) {
    check(is_file(dir / file), "safetensors: index '", index.string(), "' maps tensor '", tensor, "' to '", file,
          "', but no such file is in '", dir.string(), "'");
    ckpt->add_file(dir / file);
  }
  for (const auto& [tensor, file] : weight_map) {
    const RawTensor* t = ckpt->find(tensor);
    if (!t || fs::path(t->file) != dir / file)
      fail("safetensors: index '", index.string(), "' maps tensor '", tensor, "' to '", file,
           "', but that file does not hold it");
  }
  return ckpt;
}

}  // namespace

int probe_checkpoint(const std::string& path) {
  std::error_code ec;
  fs::path p(path);
  if (fs::is_directory(p, ec)) return is_file(p / kIndexName) || !safetensors_in(p).empty() ? 100 : 0;
  return (ends_with(path, ".safetensors") || ends_with(path, ".safetensors.index.json")) && is_file(p) ? 100 : 0;
}

std::unique_ptr<Checkpoint> open_checkpoint(const std::string& path) {
  std::error_code ec;
  fs::path p(path);
  if (fs::is_directory(p, ec)) {
    if (is_file(p / kIndexName)) return open_sharded(path, p / kIndexName);
    auto files = safetensors_in(p);
    check(!files.empty(), "safetensors: folder '", path, "' holds neither ", kIndexName, " nor any *.safetensors file");
    auto ckpt = std::make_unique<SafetensorsCheckpoint>(path, p);
    for (const auto& f : files) ckpt->add_file(f);
    return ckpt;
  }
  check(is_file(p), "safetensors: '", path, "' does not exist");
  if (ends_with(path, ".safetensors.index.json")) return open_sharded(path, p);
  check(ends_with(path, ".safetensors"), "safetensors: '", path,
        "' is neither a folder, a *.safetensors file nor a *.safetensors.index.json file");
  auto ckpt = std::make_unique<SafetensorsCheckpoint>(path, p.has_parent_path() ? p.parent_path() : fs::path("."));
  ckpt->add_file(p);
  return ckpt;
}

}  // namespace tandem::safetensors
