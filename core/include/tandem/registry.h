// The plugin registry: loads plugin modules with Boost.DLL, checks their ABI, and hands out the
// objects they provide by kind, name and device.
// Owner: the registry owns the loaded libraries and keeps them loaded for its lifetime; objects it
// hands out hold a reference that keeps their library loaded. Thread: load on one thread; lookups
// after loading may come from any thread. Sync: none.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tandem/plugin_abi.h"

namespace tandem {

class Backend;
class WeightFormat;
class LayerFactory;
class SpeculatorFactory;
class Writer;
class Converter;
enum class LayerKind;  // tandem/model_config.h

struct ProviderInfo {
  tandem_kind kind;
  std::string name;
  std::string device;   // "" when device-neutral
  std::string plugin;   // plugin name
  std::string file;     // the module it came from
  int score = 1;
};

class TANDEM_API PluginRegistry {
 public:
  PluginRegistry();
  ~PluginRegistry();
  PluginRegistry(const PluginRegistry&) = delete;
  PluginRegistry& operator=(const PluginRegistry&) = delete;

  // TANDEM_PLUGIN_PATH (':'-separated directories or module files) first, then the directory the
  // core library was built or installed with (lib/tandem/plugins beside libtandem-core.so).
  void load_default();
  // Every "libtandem-*.so" in `dir`, in name order. A missing directory is an error.
  void load_directory(const std::string& dir);
  // One module. Errors: not loadable, no entry point, ABI mismatch, init failure, a provider that
  // another module already registered under the same kind, name and device. A module whose score is
  // 0 is skipped (it cannot run here) and noted in skipped().
  void load_file(const std::string& path);
  // A format made in this process (a tool that wraps another format, e.g. the converter's
  // calibration hook), device-neutral, served as the object given. Error: a format of that name is
  // already registered device-neutral.
  void add_format(const std::string& name, std::shared_ptr<WeightFormat> format);

  const std::vector<ProviderInfo>& providers() const;
  const std::vector<std::string>& skipped() const;
  std::string default_plugin_dir() const;

  // Lookups. Each throws a one-line error naming what was asked and what is available.
  std::shared_ptr<Backend> backend(const std::string& device);
  std::shared_ptr<LayerFactory> layer(const std::string& name, const std::string& device);
  // The one layer plugin for `device` (built for it, else device-neutral) whose factory makes `kind`
  // layers (LayerFactory::kind()), for a profile that names none. Error: none or several are loaded
  // (the message names them).
  std::shared_ptr<LayerFactory> layer_for(LayerKind kind, const std::string& device);
  // A format's provider for `device`: the one built for that device (e.g. "safetensors" from
  // libtandem-safetensors-cuda.so for "cuda") if loaded, else its device-neutral provider ("").
  std::shared_ptr<WeightFormat> format(const std::string& name, const std::string& device = "");
  // A drafter's factory for `device`: the one built for that device if loaded, else the device-neutral one.
  std::shared_ptr<SpeculatorFactory> speculator(const std::string& name, const std::string& device = "");
  // A container writer ("safetensors", "gguf") and a converter ("exl3") by name; device-neutral.
  std::shared_ptr<Writer> writer(const std::string& name);
  std::shared_ptr<Converter> converter(const std::string& name);
  // The names of the providers of a kind, in registration order, each once ("exl3, gguf").
  std::vector<std::string> names(tandem_kind kind) const;
  // One provider per format name, chosen for `device` as format() does, in registration order.
  std::vector<std::pair<std::string, std::shared_ptr<WeightFormat>>> formats(const std::string& device = "");

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::shared_ptr<void> create(tandem_kind kind, const std::string& name, const std::string& device);
};

// Defines tandem_plugin_entry for a plugin from a static provider table. Use once per module:
//   static const tandem_provider kProviders[] = {{TANDEM_KIND_FORMAT, "safetensors", "", make, drop}};
//   TANDEM_DEFINE_PLUGIN("safetensors", "0.1.0", nullptr, kProviders)
#define TANDEM_DEFINE_PLUGIN(NAME, VERSION, INIT, PROVIDERS)                                     \
  TANDEM_PLUGIN_EXPORT const tandem_plugin_desc* tandem_plugin_entry(void) {                    \
    static const tandem_plugin_desc desc = {TANDEM_PLUGIN_ABI_VERSION, sizeof(tandem_plugin_desc), \
                                            NAME, VERSION, INIT,                                \
                                            uint32_t(sizeof(PROVIDERS) / sizeof(PROVIDERS[0])), \
                                            PROVIDERS};                                         \
    return &desc;                                                                               \
  }

}  // namespace tandem
