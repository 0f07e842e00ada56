// Quantized drafter modules (quant.h): the config, ModelOpt NVFP4 and MLX nvfp4/mxfp4 modules decoded,
// and NVFP4 linears handed to the target's formats.
#include "quant.h"

#include <rapidjson/document.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <spdlog/spdlog.h>

#include "formats/nvfp4/encodings.h"
#include "tandem/error.h"
#include "tandem/json_depth.h"
#include "tandem/model.h"
#include "tandem/tensor.h"

namespace tandem::lilicorr {
namespace {

bool ends_with(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string where(const RawTensor& t) { return "lilicorr: '" + t.file + "': tensor '" + printable(t.name) + "'"; }

const rapidjson::Value* member(const rapidjson::Value& v, const char* key) {
  if (!v.IsObject()) return nullptr;
  auto it = v.FindMember(key);
  return it == v.MemberEnd() || it->value.IsNull() ? nullptr : &it->value;
}

// One MLX entry (the global block or a module's object); `at` names it in errors.
DrafterQuant::MlxEntry mlx_entry(const rapidjson::Value& v, const DrafterQuant::MlxEntry& base, const std::string& at) {
  DrafterQuant::MlxEntry e = base;
  if (const rapidjson::Value* m = member(v, "mode")) {
    check(m->IsString(), at, ".mode' must be a string");
    e.mode = m->GetString();
  }
  for (auto [key, out] : {std::pair<const char*, int*>{"group_size", &e.group}, {"bits", &e.bits}})
    if (const rapidjson::Value* g = member(v, key)) {
      check(g->IsInt() && g->GetInt() > 0, at, ".", key, "' must be a positive integer");
      *out = g->GetInt();
    }
  return e;
}

// A scalar tensor's value as double (F32, F16, BF16 or F64); `what` names it in errors.
double scalar_value(const RawTensor& t, const std::string& what) {
  check(numel(t.shape) == 1, where(t), " is ", shape_str(t.shape), ": ", what, " is one value");
  double v = 0;
  if (t.dtype == "F32" && t.nbytes == 4) {
    float f;
    std::memcpy(&f, t.data, 4);
    v = f;
  } else if (t.dtype == "F64" && t.nbytes == 8) {
    std::memcpy(&v, t.data, 8);
  } else if ((t.dtype == "F16" || t.dtype == "BF16") && t.nbytes == 2) {
    uint16_t h;
    std::memcpy(&h, t.data, 2);
    v = t.dtype == "F16" ? f16_to_f32(h) : bf16_to_f32(h);
  } else {
    fail(where(t), " is ", t.dtype, " ", shape_str(t.shape), ": ", what, " is one F32 value");
  }
  check(std::isfinite(v), where(t), " is ", v, ": ", what, " must be finite");
  return v;
}

// Block scales that are NaN or negative (ModelOpt writes neither; −0 reads as 0) are refused.
void check_e4m3_scales(const RawTensor& s) {
  for (size_t i = 0; i < s.nbytes; ++i) {
    const uint8_t b = s.data[i];
    if (!nvfp4::e4m3_is_valid_scale(b))
      fail(where(s), ": block scale ", i, " (row ", i / size_t(s.shape[1]), ") is ",
           nvfp4::e4m3_is_nan(b) ? "NaN" : "negative", " (E4M3 byte 0x", std::hex, int(b), std::dec,
           "); NVFP4 block scales are >= 0");
  }
}

}  // namespace

std::vector<float> Nvfp4Weight::dequantize() const {
  std::vector<float> w(size_t(out * in));
  for (int64_t r = 0; r < out; ++r)
    for (int64_t k = 0; k < in; ++k) {
      const uint8_t b = q[size_t((r * in + k) / 2)];
      const float e = nvfp4::e2m1(k % 2 ? uint8_t(b >> 4) : uint8_t(b & 0xF));
      const float s = nvfp4::e4m3(scales[size_t(r * (in / kNvfp4Group) + k / kNvfp4Group)]);
      w[size_t(r * in + k)] = (e * s) * scale2;
    }
  return w;
}

std::shared_ptr<const Nvfp4Weight> Nvfp4Weight::rows(int64_t r0, int64_t n) const {
  auto p = std::make_shared<Nvfp4Weight>(*this);
  p->out = n;
  p->q.assign(q.begin() + r0 * (in / 2), q.begin() + (r0 + n) * (in / 2));
  p->scales.assign(scales.begin() + r0 * (in / kNvfp4Group), scales.begin() + (r0 + n) * (in / kNvfp4Group));
  return p;
}

std::shared_ptr<const Nvfp4Weight> Nvfp4Weight::cols(int64_t c0, int64_t n) const {
  if (c0 % kNvfp4Group != 0 || n % kNvfp4Group != 0) return nullptr;
  auto p = std::make_shared<Nvfp4Weight>(*this);
  p->in = n;
  p->q.resize(size_t(out * n / 2));
  p->scales.resize(size_t(out * n / kNvfp4Group));
  for (int64_t r = 0; r < out; ++r) {
    std::copy(q.begin() + r * (in / 2) + c0 / 2, q.begin() + r * (in / 2) + (c0 + n) / 2, p->q.begin() + r * (n / 2));
    std::copy(scales.begin() + r * (in / kNvfp4Group) + c0 / kNvfp4Group,
              scales.begin() + r * (in / kNvfp4Group) + (c0 + n) / kNvfp4Group,
              p->scales.begin() + r * (n / kNvfp4Group));
  }
  return p;
}

DrafterQuant read_quant(const std::string& dir, const std::string& config_json) {
  namespace fs = std::filesystem;
  DrafterQuant out;
  const std::string config = (fs::path(dir) / "config.json").string();
  rapidjson::Document doc;
  if (json_depth(config_json) > 64) return out;  // parse_config names it
  doc.Parse(config_json.c_str(), config_json.size());
  if (doc.HasParseError() || !doc.IsObject()) return out;
  const rapidjson::Value* qc = member(doc, "quantization_config");
  const rapidjson::Value* mq = member(doc, "quantization");
  std::string method;
  if (qc && qc->IsObject())
    if (const rapidjson::Value* m = member(*qc, "quant_method"); m && m->IsString()) method = m->GetString();
  std::error_code ec;
  if (fs::is_regular_file(fs::path(dir) / "hf_quant_config.json", ec) || method == "modelopt") {
    std::optional<nvfp4::QuantConfig> c;
    try {
      c = nvfp4::read_quant_config(dir);
    } catch (const Error& e) {
      fail("lilicorr: ", e.what());
    }
    check(c.has_value(), "lilicorr: ", config, ": no ModelOpt quantization config could be read");
    if (c->mixed()) {
      for (const auto& [m, s] : c->layers)
        check(s == nvfp4::Storage::NVFP4, "lilicorr: ", c->file, ": quantized_layers['", printable(m), "'] is ",
              nvfp4::storage_name(s), ": drafter modules are read as NVFP4 only");
    } else {
      check(c->uniform() == nvfp4::Storage::NVFP4, "lilicorr: ", c->file, ": quant_algo ", printable(c->quant_algo),
            ": drafter modules are read as NVFP4 only (NVFP4, W4A16_NVFP4, or MIXED_PRECISION of them)");
    }
    out.kind = DrafterQuant::Kind::Modelopt;
    out.file = c->file;
    out.modelopt = std::move(c);
    return out;
  }
  const bool mlx_qc = qc && qc->IsObject() && method.empty() &&
                      (member(*qc, "mode") || member(*qc, "bits") || member(*qc, "group_size"));
  if (mq || mlx_qc) {
    const rapidjson::Value& q = mq ? *mq : *qc;
    out.kind = DrafterQuant::Kind::Mlx;
    out.file = config;
    out.mlx_key = mq ? "quantization" : "quantization_config";
    const std::string at = "lilicorr: " + config + ": key '" + out.mlx_key;
    check(q.IsObject(), at, "' must be an object");
    out.mlx.mode = "affine";  // MLX's default when no mode is written
    out.mlx = mlx_entry(q, out.mlx, at);
    for (const auto& m : q.GetObject()) {
      const std::string name = m.name.GetString();
      if (name == "mode" || name == "group_size" || name == "bits") continue;
      const std::string mat = at + "." + printable(name);
      if (m.value.IsBool()) {
        DrafterQuant::MlxEntry e = out.mlx;
        if (!m.value.GetBool()) e.mode.clear();
        out.mlx_modules[name] = e;
      } else {
        check(m.value.IsObject(), mat, "' must be an object or true/false");
        out.mlx_modules[name] = mlx_entry(m.value, out.mlx, mat);
      }
    }
    return out;
  }
  check(!qc, "lilicorr: ", config, ": key 'quantization_config' has quant_method '", printable(method),
        "': drafter modules are read from ModelOpt (quant_method modelopt, hf_quant_config.json) or MLX ",
        "(quantization.mode nvfp4 or mxfp4) checkpoints");
  return out;
}

std::vector<ReadTensor> read_quantized(const std::vector<RawTensor>& tensors, const DrafterQuant& q) {
  std::map<std::string, const RawTensor*> by;
  for (const RawTensor& r : tensors) by[r.name] = &r;
  auto find = [&](const std::string& n) -> const RawTensor* {
    auto it = by.find(n);
    return it == by.end() ? nullptr : it->second;
  };
  std::set<std::string> used;
  std::vector<ReadTensor> out;
  const std::string cfg = q.file;

  // ModelOpt: a U8 weight with weight_scale (F8_E4M3 [out, in/16]) and weight_scale_2 (F32).
  for (const RawTensor& r : tensors) {
    if (!ends_with(r.name, ".weight") || r.dtype != "U8") continue;
    const std::string m = r.name.substr(0, r.name.size() - 7);
    check(q.kind == DrafterQuant::Kind::Modelopt, where(r), " is U8 (an NVFP4 weight), but the folder has no ModelOpt ",
          "quantization config (hf_quant_config.json, or config.json 'quantization_config' with quant_method modelopt)");
    const std::string algo = "quant_algo " + q.modelopt->quant_algo + ", group_size 16 in " + cfg;
    check(r.shape.size() == 2 && r.shape[0] > 0 && r.shape[1] > 0, where(r), " is U8 ", shape_str(r.shape),
          ": an NVFP4 weight is [out, in/2] (", algo, ")");
    Nvfp4Weight w;
    w.name = m, w.file = r.file;
    w.out = r.shape[0], w.in = 2 * r.shape[1];
    check(w.in % kNvfp4Group == 0, where(r), ": U8 ", shape_str(r.shape), " packs ", w.in,
          " inputs per row, not a multiple of group_size 16 (", algo, ")");
    check(r.nbytes == size_t(w.out * w.in / 2), where(r), " holds ", r.nbytes, " bytes, expected ", w.out * w.in / 2);
    const std::vector<int64_t> want = {w.out, w.in / kNvfp4Group};
    const RawTensor* s = find(m + ".weight_scale");
    check(s != nullptr, "lilicorr: '", r.file, "': tensor '", printable(m), ".weight_scale' is missing (NVFP4 weight '",
          printable(r.name), "' ", shape_str(r.shape), " needs F8_E4M3 block scales ", shape_str(want), ": ", algo, ")");
    check(s->dtype == "F8_E4M3" && s->shape == want && s->nbytes == size_t(numel(want)), where(*s), " is ", s->dtype, " ",
          shape_str(s->shape), ", expected F8_E4M3 ", shape_str(want), " (one scale per 16 inputs of '", printable(r.name),
          "': ", algo, ")");
    check_e4m3_scales(*s);
    const RawTensor* s2 = find(m + ".weight_scale_2");
    check(s2 != nullptr, "lilicorr: '", r.file, "': tensor '", printable(m), ".weight_scale_2' is missing (NVFP4 weight '",
          printable(r.name), "' needs its F32 per-tensor scale: ", algo, ")");
    check(s2->dtype == "F32", where(*s2), " is ", s2->dtype, " ", shape_str(s2->shape),
          ", expected one F32 value (the per-tensor scale: ", algo, ")");
    w.scale2 = float(scalar_value(*s2, "weight_scale_2"));
    w.q.assign(r.data, r.data + r.nbytes);
    w.scales.assign(s->data, s->data + s->nbytes);
    used.insert({r.name, s->name, s2->name});
    if (const RawTensor* is = find(m + ".input_scale")) {
      w.input_scale = float(scalar_value(*is, "input_scale"));
      used.insert(is->name);
    }
    ReadTensor t;
    t.stored = r.name;
    t.shape = {w.out, w.in};
    t.data = w.dequantize();
    t.nvfp4 = std::make_shared<const Nvfp4Weight>(std::move(w));
    out.push_back(std::move(t));
  }

  // MLX: `<module>.scales` beside a U32 weight; the module's entry (or the global one) gives the mode.
  for (const RawTensor& r : tensors) {
    if (!ends_with(r.name, ".scales")) continue;
    const std::string m = r.name.substr(0, r.name.size() - 7);
    check(q.kind == DrafterQuant::Kind::Mlx, where(r), " is an MLX scale, but config.json has no MLX 'quantization' ",
          "block");
    DrafterQuant::MlxEntry e = q.mlx;
    std::string key = q.mlx_key;
    for (const std::string& n : {m, m.rfind("model.", 0) == 0 ? m.substr(6) : "model." + m})
      if (auto it = q.mlx_modules.find(n); it != q.mlx_modules.end()) {
        e = it->second;
        key = q.mlx_key + "." + n;
        break;
      }
    const std::string at = q.file + " key '" + key + "'";
    check(!e.mode.empty(), where(r), ": ", at, " says module '", printable(m), "' is not quantized, but it has scales");
    check(e.mode == "nvfp4" || e.mode == "mxfp4", where(r), ": mode '", printable(e.mode), "' (", at,
          ") is not read for drafter modules (nvfp4, mxfp4)");
    const int group = e.mode == "nvfp4" ? kNvfp4Group : kMxfp4Group;
    check(e.bits == 0 || e.bits == 4, where(r), ": mode ", e.mode, " has bits 4, ", at, " says ", e.bits);
    check(e.group == 0 || e.group == group, where(r), ": mode ", e.mode, " has group_size ", group, ", ", at, " says ",
          e.group);
    const RawTensor* wp = find(m + ".weight");
    check(wp != nullptr, where(r), ": its weight '", printable(m), ".weight' is missing");
    const RawTensor& wr = *wp;
    check(wr.dtype == "U32" && wr.shape.size() == 2 && wr.shape[0] > 0 && wr.shape[1] > 0, where(wr), " is ", wr.dtype,
          " ", shape_str(wr.shape), ", expected U32 [out, in/8] (mode ", e.mode, ", ", at, ")");
    check(!find(m + ".biases"), where(r), ": mode ", e.mode, " has no biases, but '", printable(m), ".biases' exists");
    const int64_t N = wr.shape[0], K = wr.shape[1] * 8;
    check(wr.nbytes == size_t(N * K / 2), where(wr), " holds ", wr.nbytes, " bytes, expected ", N * K / 2);
    check(K % group == 0, where(wr), ": ", K, " inputs per row, not a multiple of group_size ", group, " (", at, ")");
    const std::vector<int64_t> want = {N, K / group};
    check(r.dtype == "U8" && r.shape == want && r.nbytes == size_t(numel(want)), where(r), " is ", r.dtype, " ",
          shape_str(r.shape), ", expected U8 ", shape_str(want), " (one scale per group_size ", group, " inputs, mode ",
          e.mode, ", ", at, ")");
    used.insert({wr.name, r.name});
    ReadTensor t;
    t.stored = wr.name;
    t.shape = {N, K};
    if (e.mode == "nvfp4") {
      // The words' bytes are ModelOpt's U8 stream (element e in bits 4(e % 8) of word e / 8, low
      // nibble first; docs/formats-mlx.md). The global scale is MLX's amax convention: multiplier =
      // global_scale / (6·448), rounded once to f32, which is ModelOpt's weight_scale_2 for the same amax.
      Nvfp4Weight w;
      w.name = m, w.file = wr.file, w.out = N, w.in = K;
      w.q.assign(wr.data, wr.data + wr.nbytes);
      w.scales.assign(r.data, r.data + r.nbytes);
      for (size_t i = 0; i < w.scales.size(); ++i) {
        uint8_t& b = w.scales[i];
        check(!nvfp4::e4m3_is_nan(b), where(r), ": block scale ", i, " is NaN (E4M3 byte 0x", std::hex, int(b), std::dec,
              ")");
        if (b & 0x80) {  // a negative scale: its magnitude, with the 16 elements' signs flipped (exact)
          b &= 0x7F;
          const size_t row = i / size_t(K / kNvfp4Group), g = i % size_t(K / kNvfp4Group);
          for (int j = 0; j < kNvfp4Group / 2; ++j) w.q[row * size_t(K / 2) + g * 8 + size_t(j)] ^= 0x88;
        }
      }
      if (const RawTensor* gs = find(m + ".global_scale")) {
        w.scale2 = float(scalar_value(*gs, "global_scale") / (6.0 * 448.0));
        used.insert(gs->name);
      }
      t.data = w.dequantize();
      t.nvfp4 = std::make_shared<const Nvfp4Weight>(std::move(w));
    } else {
      // mxfp4: e2m1 elements times 2^(s − 127) (E8M0 scales, 0xFF is NaN): exact in BF16.
      t.mxfp4 = true;
      t.data.resize(size_t(N * K));
      for (int64_t i = 0; i < N * K; ++i) {
        const uint8_t s = r.data[i / kMxfp4Group];
        check(s != 0xFF, where(r), ": block scale ", i / kMxfp4Group, " is NaN (E8M0 byte 0xff)");
        const uint8_t b = wr.data[i / 2];
        t.data[size_t(i)] = std::ldexp(nvfp4::e2m1(i % 2 ? uint8_t(b >> 4) : uint8_t(b & 0xF)), int(s) - 127);
      }
    }
    out.push_back(std::move(t));
  }

  // Dense tensors, and what no module took.
  for (const RawTensor& r : tensors) {
    if (used.count(r.name)) continue;
    if (ends_with(r.name, ".k_scale") || ends_with(r.name, ".v_scale")) continue;  // FP8 KV cache: the cache stays f32
    for (const char* s : {".weight_scale_2", ".weight_scale", ".input_scale", ".global_scale", ".biases"})
      check(!ends_with(r.name, s), where(r), " is a quantization scale, but its module has no quantized weight (",
            q.kind == DrafterQuant::Kind::None ? "config.json has no quantization config" : "quantization per " + cfg, ")");
    ReadTensor t;
    t.stored = r.name;
    t.shape = r.shape;
    const size_t n = size_t(numel(r.shape));
    t.data.resize(n);
    if (r.dtype == "F32") {
      check(r.nbytes == n * 4, where(r), " holds ", r.nbytes, " bytes, expected ", n * 4);
      std::memcpy(t.data.data(), r.data, n * 4);
    } else if (r.dtype == "BF16" || r.dtype == "F16") {
      check(r.nbytes == n * 2, where(r), " holds ", r.nbytes, " bytes, expected ", n * 2);
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, r.data + 2 * i, 2);
        t.data[i] = r.dtype == "BF16" ? bf16_to_f32(h) : f16_to_f32(h);
      }
    } else if (r.dtype == "F8_E4M3" && ends_with(r.name, ".weight")) {
      fail(where(r), " is F8_E4M3: FP8 drafter modules are not read (NVFP4 only)");
    } else {
      fail(where(r), " is ", r.dtype, ": not supported (BF16, F16, F32; quantized modules: ModelOpt NVFP4, MLX nvfp4 ",
           "or mxfp4)");
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}

Linear slice_rows(const Linear& l, int64_t r0, int64_t n) {
  Linear p;
  p.out = n, p.in = l.in;
  p.w.assign(l.w.begin() + r0 * l.in, l.w.begin() + (r0 + n) * l.in);
  if (!l.b.empty()) p.b.assign(l.b.begin() + r0, l.b.begin() + r0 + n);
  if (l.nvfp4) p.nvfp4 = l.nvfp4->rows(r0, n);
  return p;
}

Linear slice_cols(const Linear& l, int64_t c0, int64_t n, bool bias, const std::string& name) {
  Linear p;
  p.out = l.out, p.in = n;
  p.w.resize(size_t(l.out * n));
  for (int64_t o = 0; o < l.out; ++o)
    std::copy(l.w.begin() + o * l.in + c0, l.w.begin() + o * l.in + c0 + n, p.w.begin() + o * n);
  if (bias) p.b = l.b;
  if (l.nvfp4) {
    p.nvfp4 = l.nvfp4->cols(c0, n);
    if (!p.nvfp4) {
      spdlog::warn("lilicorr: NVFP4 tensor '{}.weight' is split at columns {}…{} ({}), off its 16-input groups: "
                   "dequantized to BF16",
                   l.nvfp4->name, c0, c0 + n - 1, name);
      p.w = round_bf16(std::move(p.w));
    }
  }
  return p;
}

DeviceLinear load_linear(WeightSource& d, Model& target, const std::string& name, const Linear& l) {
  if (!l.nvfp4) return load_linear(d, target, name, l.out, l.in, l.w.data(), l.b);
  const Nvfp4Weight& n = *l.nvfp4;
  check(n.out == l.out && n.in == l.in, "lilicorr: ", name, ": NVFP4 form ", n.out, "×", n.in, ", values ", l.out, "×",
        l.in);
  auto raw = [&](const char* suffix, const char* dtype, std::vector<int64_t> shape, const void* data,
                 size_t nbytes) -> const RawTensor* {
    const auto* p = static_cast<const uint8_t*>(data);
    std::vector<uint8_t>& bytes = d.bytes.emplace_back(p, p + nbytes);
    RawTensor r;
    r.name = name + "." + suffix;
    r.dtype = dtype;
    r.shape = std::move(shape);
    r.data = bytes.data();
    r.nbytes = bytes.size();
    r.file = n.file;
    return &d.raws.emplace_back(std::move(r));
  };
  TensorGroup g;
  g.prefix = name;
  g.shape = {l.out, l.in};
  g.members = {raw("weight", "U8", {l.out, l.in / 2}, n.q.data(), n.q.size()),
               raw("weight_scale", "F8_E4M3", {l.out, l.in / kNvfp4Group}, n.scales.data(), n.scales.size()),
               raw("weight_scale_2", "F32", {}, &n.scale2, 4)};
  if (n.input_scale) g.members.push_back(raw("input_scale", "F32", {}, &*n.input_scale, 4));
  DeviceLinear L;
  try {
    L.w = target.load_weight(g);
    check(L.w->rows() == l.out && L.w->cols() == l.in, "loaded as ", L.w->rows(), "×", L.w->cols(), ", expected ", l.out,
          "×", l.in);
  } catch (const std::exception& e) {
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));
    spdlog::warn("lilicorr: NVFP4 tensor '{}.weight' ({}) does not load through the target's formats ({}): dequantized "
                 "to BF16",
                 n.name, name, why);
    const std::vector<float> w = round_bf16(l.w);
    return load_linear(d, target, name, l.out, l.in, w.data(), l.b);
  }
  if (!l.b.empty()) L.bias = upload_f32(target.backend(), l.b);
  return L;
}

}  // namespace tandem::lilicorr
