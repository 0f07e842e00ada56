// GGML blocks → an MLX folder: modules grouped (experts stacked), each tensor transcoded as it is
// written, so memory holds one module at a time.
#include "mlx_writer.h"

#include <rapidjson/document.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "mlx_files.h"
#include "mlx_repack.h"
#include "tandem/error.h"

namespace tandem::mlx {
namespace fs = std::filesystem;
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool is_float(const std::string& dtype) { return dtype == "F32" || dtype == "F16" || dtype == "BF16"; }

// One output module: its tensors by suffix ("weight", "scale", "bias", …), one per expert when stacked.
struct Module {
  bool stacked = false;
  std::map<std::string, std::map<int64_t, const RawTensor*>> parts;
};

// "…mixer.experts.7.up_proj.weight" → ("…mixer.switch_mlp.fc1", 7, "weight").
bool expert_name(const std::string& name, std::string& module, int64_t& j, std::string& suffix) {
  const size_t at = name.find(".experts.");
  if (at == std::string::npos) return false;
  size_t i = at + 9;
  const size_t d0 = i;
  j = 0;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && i - d0 < 9)
    j = j * 10 + (name[i++] - '0');
  if (i == d0 || i >= name.size() || name[i] != '.') return false;
  const std::string rest = name.substr(i + 1);
  for (const auto& [hf, mlx] : {std::pair{"up_proj.", "fc1"}, std::pair{"down_proj.", "fc2"}})
    if (rest.compare(0, std::strlen(hf), hf) == 0 && rest.find('.', std::strlen(hf)) == std::string::npos) {
      module = name.substr(0, at) + ".switch_mlp." + mlx;
      suffix = rest.substr(std::strlen(hf));
      return true;
    }
  return false;
}

struct Item {
  OutTensor spec;
  std::function<void(std::vector<uint8_t>&)> bytes;  // fills the tensor's bytes
};

std::string q_mode(const std::string& dtype) {
  return dtype == "IQ2_XXS" ? "iq2_xxs" : dtype == "NVFP4" ? "nvfp4" : dtype == "Q8_0" ? "affine" : "";
}

class Plan {
 public:
  explicit Plan(const Checkpoint& in) {
    std::map<std::string, Module> modules;
    for (const RawTensor& t : in.tensors()) {
      std::string module, suffix;
      int64_t j = 0;
      if (expert_name(t.name, module, j, suffix)) {
        Module& m = modules[module];
        m.stacked = true;
        check(m.parts[suffix].emplace(j, &t).second, "mlx writer: expert ", j, " of '", module, "' appears twice");
        continue;
      }
      const size_t dot = t.name.rfind('.');
      module = dot == std::string::npos ? t.name : t.name.substr(0, dot);
      suffix = dot == std::string::npos ? "" : t.name.substr(dot + 1);
      modules[module].parts[suffix].emplace(0, &t);
    }
    for (auto& [name, m] : modules) add(name, m);
  }

  std::vector<Item> items;
  std::map<std::string, std::string> quantized;  // module → mode (iq2_xxs, nvfp4, affine)

 private:
  // The experts of one part, checked to be 0..E-1 of one dtype and shape.
  static std::vector<const RawTensor*> ordered(const std::string& module,
                                               const std::map<int64_t, const RawTensor*>& by) {
    std::vector<const RawTensor*> v;
    for (const auto& [j, t] : by) {
      check(j == int64_t(v.size()), "mlx writer: '", module, "': expert ", v.size(), " is missing (found ", j, ")");
      if (!v.empty() && (t->dtype != v[0]->dtype || t->shape != v[0]->shape))
        fail("mlx writer: tensor '", t->name, "' is ", t->dtype, " ", shape_str(t->shape), ", expert 0 is ",
             v[0]->dtype, " ", shape_str(v[0]->shape));
      v.push_back(t);
    }
    return v;
  }

  void add(const std::string& module, const Module& m) {
    auto w = m.parts.find("weight");
    const std::string wdtype = w != m.parts.end() ? w->second.begin()->second->dtype : "";
    const std::string mode = q_mode(wdtype);
    for (const auto& [suffix, by] : m.parts) {
      std::vector<const RawTensor*> ts = ordered(module, by);
      const RawTensor& t0 = *ts[0];
      if (!mode.empty() && (suffix == "weight" || suffix == "scale")) continue;  // below
      if (!mode.empty() && suffix == "input_scale") continue;  // W4A4 only; weight-only use ignores it
      check(is_float(t0.dtype), "mlx writer: tensor '", t0.name, "' has type ", t0.dtype,
            ", which has no MLX layout here (IQ2_XXS, NVFP4, Q8_0 and F32/F16/BF16 do)");
      std::vector<int64_t> shape = t0.shape;
      // MLX keeps conv1d weights as [channels, kernel, 1]; GGUF's [channels, kernel] has the same bytes.
      if (ends_with(module, "conv1d") && suffix == "weight" && shape.size() == 2) shape.push_back(1);
      if (m.stacked) shape.insert(shape.begin(), int64_t(ts.size()));
      const std::string name = module + (suffix.empty() ? "" : "." + suffix);
      items.push_back({{name, t0.dtype, shape}, [ts](std::vector<uint8_t>& out) {
                         out.clear();
                         for (const RawTensor* t : ts) out.insert(out.end(), t->data, t->data + t->nbytes);
                       }});
    }
    if (mode.empty()) return;
    quantized[module] = mode;
    std::vector<const RawTensor*> ws = ordered(module, w->second);
    const RawTensor& w0 = *ws[0];
    check(w0.shape.size() == 2, "mlx writer: tensor '", w0.name, "': expected [out, in], found ", shape_str(w0.shape));
    const int64_t n = w0.shape[0], k = w0.shape[1], e = int64_t(ws.size());
    std::vector<int64_t> lead = m.stacked ? std::vector<int64_t>{e, n} : std::vector<int64_t>{n};
    auto shape = [&](int64_t cols) {
      std::vector<int64_t> s = lead;
      s.push_back(cols);
      return s;
    };
    const std::string at = "mlx writer: tensor '" + w0.name + "'";
    // Every transcoder maps rows independently, so experts are concatenated row-wise.
    auto each = [ws](std::vector<uint8_t>& out, size_t row_out, int64_t rows,
                     const std::function<void(const uint8_t*, uint8_t*)>& fn) {
      out.assign(size_t(rows) * row_out * ws.size(), 0);
      for (size_t j = 0; j < ws.size(); ++j) fn(ws[j]->data, out.data() + j * size_t(rows) * row_out);
    };
    if (mode == "iq2_xxs") {
      items.push_back({{module + ".weight", "U32", shape(k / 16)}, [=](std::vector<uint8_t>& out) {
                         std::vector<uint8_t> scales(size_t(n * k / kIq2Block * 2));
                         each(out, size_t(k / 4), n, [&](const uint8_t* in, uint8_t* o) {
                           iq2_xxs_from_gguf(in, n, k, o, scales.data());
                         });
                       }});
      items.push_back({{module + ".scales", "F16", shape(k / kIq2Block)}, [=](std::vector<uint8_t>& out) {
                         std::vector<uint8_t> words(size_t(n * k / 4));
                         each(out, size_t(k / kIq2Block * 2), n, [&](const uint8_t* in, uint8_t* o) {
                           iq2_xxs_from_gguf(in, n, k, words.data(), o);
                         });
                       }});
    } else if (mode == "nvfp4") {
      items.push_back({{module + ".weight", "U32", shape(k / 8)}, [=](std::vector<uint8_t>& out) {
                         std::vector<uint8_t> scales(size_t(n * k / 16));
                         each(out, size_t(k / 2), n, [&](const uint8_t* in, uint8_t* o) {
                           nvfp4_from_gguf(in, n, k, o, scales.data());
                         });
                       }});
      items.push_back({{module + ".scales", "U8", shape(k / 16)}, [=](std::vector<uint8_t>& out) {
                         std::vector<uint8_t> words(size_t(n * k / 2));
                         each(out, size_t(k / 16), n, [&](const uint8_t* in, uint8_t* o) {
                           nvfp4_from_gguf(in, n, k, words.data(), o);
                         });
                       }});
      auto sc = m.parts.find("scale");
      if (sc != m.parts.end()) {
        std::vector<const RawTensor*> ss = ordered(module, sc->second);
        check(ss.size() == ws.size(), at, ": ", ss.size(), " scales for ", ws.size(), " experts");
        std::vector<float> mult;
        std::vector<float> g32;
        bool all_f32 = true;
        for (const RawTensor* s : ss) {
          check(s->dtype == "F32" && s->nbytes == 4, "mlx writer: tensor '", s->name, "': expected one F32, found ",
                s->dtype, " ", shape_str(s->shape));
          float v, g = 0;
          std::memcpy(&v, s->data, 4);
          mult.push_back(v);
          all_f32 = all_f32 && nvfp4_global_scale_f32(v, g);
          g32.push_back(g);
        }
        const std::vector<int64_t> gshape = m.stacked ? std::vector<int64_t>{e} : std::vector<int64_t>{};
        auto bytes = [mult, g32, all_f32](std::vector<uint8_t>& out) {
          out.resize(mult.size() * (all_f32 ? 4 : 8));
          for (size_t i = 0; i < mult.size(); ++i) {
            if (all_f32) {
              std::memcpy(out.data() + 4 * i, &g32[i], 4);
            } else {
              const double g = double(mult[i]) * 2688.0;  // exact: 24 + 5 bits
              std::memcpy(out.data() + 8 * i, &g, 8);
            }
          }
        };
        items.push_back({{module + ".global_scale", all_f32 ? "F32" : "F64", gshape}, bytes});
      }
    } else {
      auto affine = [=](int which) {
        return [=](std::vector<uint8_t>& out) {
          std::vector<uint8_t> words(size_t(n * k)), scales(size_t(n * k / 32 * 2)), biases(scales.size());
          const size_t row_out = which == 0 ? size_t(k) : size_t(k / 32 * 2);
          each(out, row_out, n, [&](const uint8_t* in, uint8_t* o) {
            q8_0_to_affine8(in, n, k, which == 0 ? o : words.data(), which == 1 ? o : scales.data(),
                            which == 2 ? o : biases.data(), at);
          });
        };
      };
      items.push_back({{module + ".weight", "U32", shape(k / 4)}, affine(0)});
      items.push_back({{module + ".scales", "F16", shape(k / 32)}, affine(1)});
      items.push_back({{module + ".biases", "F16", shape(k / 32)}, affine(2)});
    }
  }
};

void add_member(rapidjson::Value& obj, const std::string& key, rapidjson::Value v,
                rapidjson::Document::AllocatorType& a) {
  if (obj.HasMember(key.c_str())) obj.RemoveMember(key.c_str());
  obj.AddMember(rapidjson::Value(key.c_str(), a), v, a);
}

rapidjson::Value spec(int bits, int group, const char* mode, rapidjson::Document::AllocatorType& a) {
  rapidjson::Value v(rapidjson::kObjectType);
  v.AddMember("group_size", group, a);
  v.AddMember("bits", bits, a);
  v.AddMember("mode", rapidjson::Value(mode, a), a);
  return v;
}

std::string config_with_quantization(const std::string& config, const std::map<std::string, std::string>& quantized) {
  rapidjson::Document doc;
  doc.Parse(config.data(), config.size());
  check(!doc.HasParseError() && doc.IsObject(), "mlx writer: the input's config is not a JSON object");
  auto& a = doc.GetAllocator();
  rapidjson::Value q = spec(8, 32, "affine", a);  // the default: 8-bit affine, the Q8_0 transcode
  for (const auto& [module, mode] : quantized) {
    if (mode == "affine") continue;
    rapidjson::Value entry = mode == "nvfp4" ? spec(4, 16, "nvfp4", a) : spec(2, 256, "iq2_xxs", a);
    q.AddMember(rapidjson::Value(module.c_str(), a), entry, a);
  }
  rapidjson::Value copy(q, a);
  add_member(doc, "quantization", std::move(q), a);
  add_member(doc, "quantization_config", std::move(copy), a);
  rapidjson::StringBuffer sb;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> w(sb);
  w.SetIndent(' ', 2);
  doc.Accept(w);
  return std::string(sb.GetString()) + "\n";
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  check(bool(out.flush()), "mlx writer: cannot write '", p.string(), "'");
}

}  // namespace

void write_mlx_folder(const Checkpoint& input, const std::string& dir) {
  const Plan plan(input);
  fs::create_directories(dir);
  write_text(fs::path(dir) / "config.json", config_with_quantization(input.config_json(), plan.quantized));
  for (const char* side : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    if (auto text = input.side_file(side)) write_text(fs::path(dir) / side, *text);
  std::vector<OutTensor> specs;
  for (const Item& i : plan.items) specs.push_back(i.spec);
  SafetensorsOut out((fs::path(dir) / "model.safetensors").string(), specs);
  std::vector<uint8_t> buf;
  for (const Item& i : plan.items) {
    i.bytes(buf);
    uint64_t numel = 1;
    for (int64_t d : i.spec.shape) numel *= uint64_t(d);
    check(buf.size() == numel * element_bytes(i.spec.dtype), "mlx writer: tensor '", i.spec.name, "': made ",
          buf.size(), " bytes, its shape needs ", numel * element_bytes(i.spec.dtype));
    out.write(buf.data(), buf.size());
  }
  out.close();
}

}  // namespace tandem::mlx
