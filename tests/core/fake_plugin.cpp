// One source, several deliberately broken or odd plugins (selected by FAKE_CASE) for registry tests.
#include <cstring>

#include "tandem/layer.h"
#include "tandem/plugin_abi.h"
#include "tandem/weights.h"

namespace {

struct NullFormat : tandem::WeightFormat {
  int probe_group(const tandem::TensorGroup&) const override { return 0; }
  std::unique_ptr<tandem::QuantizedTensor> load(const tandem::TensorGroup&, tandem::Backend&) const override {
    return nullptr;
  }
};

int create_ok(void** out, char*, size_t) {
  *out = static_cast<tandem::WeightFormat*>(new NullFormat());
  return TANDEM_OK;
}
int create_fail(void**, char* err, size_t n) {
  std::strncpy(err, "fake: out of fake memory", n);
  return TANDEM_ERROR;
}
void destroy(void* p) { delete static_cast<tandem::WeightFormat*>(p); }

int init_fail(char* err, size_t n) {
  std::strncpy(err, "fake: no device found", n);
  return TANDEM_ERROR;
}

// Case 7: two layer plugins for the CPU, one per layer kind (PluginRegistry::layer_for picks by kind).
template <tandem::LayerKind K>
struct KindOnlyLayers : tandem::LayerFactory {
  tandem::LayerKind kind() const override { return K; }
  std::unique_ptr<tandem::Mixer> create(const tandem::LayerDesc&, int, tandem::WeightLoader&, tandem::Backend&) override {
    return nullptr;
  }
};
template <tandem::LayerKind K>
int create_layers(void** out, char*, size_t) {
  *out = static_cast<tandem::LayerFactory*>(new KindOnlyLayers<K>());
  return TANDEM_OK;
}
void destroy_layers(void* p) { delete static_cast<tandem::LayerFactory*>(p); }

#if FAKE_CASE == 6
const tandem_provider kProviders[] = {{TANDEM_KIND_FORMAT, "fake-broken", "", create_fail, destroy}};
#elif FAKE_CASE == 7
const tandem_provider kProviders[] = {
    {TANDEM_KIND_LAYER, "fake-mamba", "cpu", create_layers<tandem::LayerKind::Mamba>, destroy_layers},
    {TANDEM_KIND_LAYER, "fake-attention", "cpu", create_layers<tandem::LayerKind::Attention>, destroy_layers}};
#else
const tandem_provider kProviders[] = {{TANDEM_KIND_FORMAT, FAKE_PROVIDER, "", create_ok, destroy}};
#endif

}  // namespace

#if FAKE_CASE != 5  // case 5: no entry point at all
TANDEM_PLUGIN_EXPORT const tandem_plugin_desc* tandem_plugin_entry(void) {
  static const tandem_plugin_desc d = {
#if FAKE_CASE == 1
      999u,
#else
      TANDEM_PLUGIN_ABI_VERSION,
#endif
      sizeof(tandem_plugin_desc), "fake", "0",
#if FAKE_CASE == 2
      init_fail,
#else
      nullptr,
#endif
      uint32_t(sizeof(kProviders) / sizeof(kProviders[0])), kProviders};
  return &d;
}
#endif

#if FAKE_CASE == 4
TANDEM_PLUGIN_EXPORT int tandem_plugin_score(void) { return 0; }
#endif

TANDEM_PLUGIN_EXPORT int tandem_fake_unused(void) { return init_fail(nullptr, 0) + create_fail(nullptr, nullptr, 0); }
