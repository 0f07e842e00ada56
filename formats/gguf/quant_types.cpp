// The table of GGML block types tandem computes on the CPU, and the name of any ggml type id (from
// the ggml type table, plus retired ids) so an unsupported tensor can be reported by name
// (spec/formats.md § 2.4).
#include <cctype>
#include <utility>

#include "gguf_metadata.h"
#include "kernels_cpu.h"
#include "quant.h"

namespace tandem::gguf {
namespace {

// The activation format is llama.cpp's vec_dot_type for the type (ggml-cpu type traits, checked
// against the bundled node-llama-cpp 3.22.1 build).
constexpr QuantType kTypes[] = {
    {0, "F32", 1, 4, dequantize_f32, dot_f32, ActFormat::F32, dot_act_f32},
    {1, "F16", 1, 2, dequantize_f16, dot_f16, ActFormat::F16, dot_act_f16},
    {8, "Q8_0", 32, 34, dequantize_q8_0, dot_q8_0, ActFormat::Q8_0, dot_act_q8_0},
    {12, "Q4_K", 256, 144, dequantize_q4_k, dot_q4_k, ActFormat::Q8_K, dot_act_q4_k},
    {13, "Q5_K", 256, 176, dequantize_q5_k, dot_q5_k, ActFormat::Q8_K, dot_act_q5_k},
    {14, "Q6_K", 256, 210, dequantize_q6_k, dot_q6_k, ActFormat::Q8_K, dot_act_q6_k},
    {16, "IQ2_XXS", 256, 66, dequantize_iq2_xxs, dot_iq2_xxs, ActFormat::Q8_K, dot_act_iq2_xxs},
    {17, "IQ2_XS", 256, 74, dequantize_iq2_xs, dot_iq2_xs, ActFormat::Q8_K, dot_act_iq2_xs},
    {18, "IQ3_XXS", 256, 98, dequantize_iq3_xxs, dot_iq3_xxs, ActFormat::Q8_K, dot_act_iq3_xxs},
    {20, "IQ4_NL", 32, 18, dequantize_iq4_nl, dot_iq4_nl, ActFormat::Q8_0, dot_act_iq4_nl},
    {21, "IQ3_S", 256, 110, dequantize_iq3_s, dot_iq3_s, ActFormat::Q8_K, dot_act_iq3_s},
    {22, "IQ2_S", 256, 82, dequantize_iq2_s, dot_iq2_s, ActFormat::Q8_K, dot_act_iq2_s},
    {23, "IQ4_XS", 256, 136, dequantize_iq4_xs, dot_iq4_xs, ActFormat::Q8_K, dot_act_iq4_xs},
    {29, "IQ1_M", 256, 56, dequantize_iq1_m, dot_iq1_m, ActFormat::Q8_K, dot_act_iq1_m},
    {30, "BF16", 1, 2, dequantize_bf16, dot_bf16, ActFormat::BF16, dot_act_bf16},
    {40, "NVFP4", 64, 36, dequantize_nvfp4, dot_nvfp4, ActFormat::Q8_0, dot_act_nvfp4},
};

// Ids upstream retired (absent from the ggml type table in gguf_metadata.cpp) keep their old names:
// a file carrying one is then reported for what it is.
constexpr std::pair<int, const char*> kRetiredNames[] = {
    {4, "Q4_2"},      {5, "Q4_3"},        {31, "Q4_0_4_4"},   {32, "Q4_0_4_8"},
    {33, "Q4_0_8_8"}, {36, "IQ4_NL_4_4"}, {37, "IQ4_NL_4_8"}, {38, "IQ4_NL_8_8"},
};

bool same_name(const char* a, const std::string& b) {
  size_t i = 0;
  for (; a[i] != '\0'; ++i)
    if (i >= b.size() || std::toupper(static_cast<unsigned char>(a[i])) != std::toupper(static_cast<unsigned char>(b[i])))
      return false;
  return i == b.size();
}

}  // namespace

const QuantType* find_type(int ggml_id) {
  for (const QuantType& t : kTypes)
    if (t.id == ggml_id) return &t;
  return nullptr;
}

// Case-insensitive, so "q4_k" in a config names the same type as the file's "Q4_K".
const QuantType* find_type(const std::string& name) {
  for (const QuantType& t : kTypes)
    if (same_name(t.name, name)) return &t;
  return nullptr;
}

std::string ggml_type_name(int ggml_id) {
  if (const GgmlTypeInfo* t = ggml_type_info(ggml_id)) return t->name;
  for (const auto& [id, name] : kRetiredNames)
    if (id == ggml_id) return name;
  return "type " + std::to_string(ggml_id);
}

}  // namespace tandem::gguf
