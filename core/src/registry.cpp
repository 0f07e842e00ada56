// Plugin registry: Boost.DLL loading, ABI checks, and lookups by kind, name and device.
#include "tandem/registry.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <spdlog/spdlog.h>

#include "tandem/backend.h"
#include "tandem/converter.h"
#include "tandem/error.h"
#include "tandem/layer.h"
#include "tandem/model_config.h"
#include "tandem/speculator.h"
#include "tandem/weights.h"
#include "tandem/writer.h"

namespace fs = std::filesystem;

namespace tandem {
namespace {

const char* kind_name(uint32_t k) {
  switch (k) {
    case TANDEM_KIND_BACKEND: return "backend";
    case TANDEM_KIND_FORMAT: return "format";
    case TANDEM_KIND_LAYER: return "layer";
    case TANDEM_KIND_SPECULATOR: return "speculator";
    case TANDEM_KIND_WRITER: return "writer";
    case TANDEM_KIND_CONVERTER: return "converter";
  }
  return "unknown";
}

std::string where(const std::string& name, const std::string& device) {
  return device.empty() ? "'" + name + "'" : "'" + name + "' for device '" + device + "'";
}

}  // namespace

struct PluginRegistry::Impl {
  struct Provider {
    ProviderInfo info;
    tandem_create_fn create;
    tandem_destroy_fn destroy;
    std::shared_ptr<boost::dll::shared_library> lib;
    std::shared_ptr<void> instance;  // in-process providers (add_format): served as is
  };
  std::vector<Provider> providers;
  std::vector<ProviderInfo> infos;
  std::vector<std::string> skipped;
  std::vector<std::string> loaded_files;  // canonical paths

  // The provider built for `device`, else the device-neutral one.
  const Provider* find(tandem_kind kind, const std::string& name, const std::string& device) const {
    const Provider* neutral = nullptr;
    for (const auto& p : providers)
      if (p.info.kind == kind && p.info.name == name) {
        if (p.info.device == device) return &p;
        if (p.info.device.empty()) neutral = &p;
      }
    return neutral;
  }
  std::string available(tandem_kind kind) const {
    std::string s;
    for (const auto& p : providers)
      if (p.info.kind == kind)
        s += (s.empty() ? "" : ", ") + p.info.name + (p.info.device.empty() ? "" : "/" + p.info.device);
    return s.empty() ? "none" : s;
  }
};

PluginRegistry::PluginRegistry() : impl_(std::make_unique<Impl>()) {}
PluginRegistry::~PluginRegistry() = default;

const std::vector<ProviderInfo>& PluginRegistry::providers() const { return impl_->infos; }
const std::vector<std::string>& PluginRegistry::skipped() const { return impl_->skipped; }

std::string PluginRegistry::default_plugin_dir() const {
  // The core library sits in <prefix>/lib; plugins in <prefix>/lib/tandem/plugins.
  fs::path self = boost::dll::this_line_location();
  return (self.parent_path() / TANDEM_PLUGIN_SUBDIR).string();
}

void PluginRegistry::load_default() {
  if (const char* env = std::getenv("TANDEM_PLUGIN_PATH"); env && *env) {
    std::string paths = env;
    size_t start = 0;
    while (start <= paths.size()) {
      size_t end = paths.find(':', start);
      if (end == std::string::npos) end = paths.size();
      std::string p = paths.substr(start, end - start);
      if (!p.empty()) {
        if (fs::is_directory(p)) load_directory(p);
        else if (fs::exists(p)) load_file(p);
        else fail("TANDEM_PLUGIN_PATH: '", p, "' is neither a directory nor a plugin file");
      }
      start = end + 1;
    }
  }
  std::string dir = default_plugin_dir();
  if (fs::is_directory(dir)) load_directory(dir);
  if (impl_->providers.empty())
    fail("no tandem plugins found (looked in '", dir, "' and TANDEM_PLUGIN_PATH)");
}

void PluginRegistry::load_directory(const std::string& dir) {
  check(fs::is_directory(dir), "plugin directory '", dir, "' does not exist");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (e.is_regular_file() && n.rfind("libtandem-", 0) == 0 && e.path().extension() == ".so")
      files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) load_file(f.string());
}

void PluginRegistry::load_file(const std::string& path) {
  std::error_code ec;
  fs::path canon = fs::weakly_canonical(path, ec);
  std::string key = ec ? path : canon.string();
  if (std::find(impl_->loaded_files.begin(), impl_->loaded_files.end(), key) != impl_->loaded_files.end())
    return;  // the same module reached twice (build dir and TANDEM_PLUGIN_PATH)
  check(fs::exists(path), "plugin '", path, "': file not found");

  auto lib = std::make_shared<boost::dll::shared_library>();
  boost::dll::fs::error_code bec;
  lib->load(path, boost::dll::load_mode::rtld_lazy | boost::dll::load_mode::rtld_local, bec);
  if (bec) fail("plugin '", path, "': cannot load: ", bec.message());
  if (!lib->has("tandem_plugin_entry"))
    fail("plugin '", path, "': no tandem_plugin_entry symbol (not a tandem plugin)");
  auto entry = lib->get<const tandem_plugin_desc*()>("tandem_plugin_entry");
  const tandem_plugin_desc* d = entry();
  check(d != nullptr, "plugin '", path, "': tandem_plugin_entry returned null");
  if (d->abi_version != TANDEM_PLUGIN_ABI_VERSION)
    fail("plugin '", path, "': ABI version ", d->abi_version, ", this tandem expects ",
         TANDEM_PLUGIN_ABI_VERSION, " (rebuild the plugin against this core)");
  if (d->struct_size != sizeof(tandem_plugin_desc))
    fail("plugin '", path, "': descriptor size ", d->struct_size, ", expected ", sizeof(tandem_plugin_desc));
  std::string pname = d->name ? d->name : "";
  check(!pname.empty(), "plugin '", path, "': descriptor has no name");

  int score = 1;
  if (lib->has("tandem_plugin_score")) {
    score = lib->get<int()>("tandem_plugin_score")();
    if (score <= 0) {
      impl_->skipped.push_back(path);
      spdlog::debug("plugin '{}' ({}) cannot run on this machine; skipped", pname, path);
      impl_->loaded_files.push_back(key);
      return;
    }
  }
  // Check every provider before registering any, so a failed module leaves no trace.
  for (uint32_t i = 0; i < d->n_providers; ++i) {
    const tandem_provider& p = d->providers[i];
    std::string name = p.name ? p.name : "", dev = p.device ? p.device : "";
    check(!name.empty() && p.create && p.destroy, "plugin '", path, "': provider ", i,
          " is incomplete (name, create and destroy are required)");
    check(p.kind >= TANDEM_KIND_BACKEND && p.kind <= TANDEM_KIND_CONVERTER, "plugin '", path,
          "': provider '", name, "' has unknown kind ", p.kind);
    for (const auto& q : impl_->providers)
      if (q.info.kind == p.kind && q.info.name == name && q.info.device == dev)
        fail("plugins '", q.info.file, "' and '", path, "' both provide ", kind_name(p.kind), " ",
             where(name, dev));
  }
  if (d->init) {
    char err[512] = {0};
    if (d->init(err, sizeof err) != TANDEM_OK)
      fail("plugin '", path, "' (", pname, ") failed to initialize: ", err[0] ? err : "no message");
  }
  for (uint32_t i = 0; i < d->n_providers; ++i) {
    const tandem_provider& p = d->providers[i];
    Impl::Provider prov{{tandem_kind(p.kind), p.name, p.device ? p.device : "", pname, path, score},
                        p.create, p.destroy, lib};
    impl_->providers.push_back(prov);
    impl_->infos.push_back(prov.info);
  }
  impl_->loaded_files.push_back(key);
}

void PluginRegistry::add_format(const std::string& name, std::shared_ptr<WeightFormat> format) {
  check(!name.empty() && format != nullptr, "add_format: a name and a format are required");
  for (const auto& q : impl_->providers)
    if (q.info.kind == TANDEM_KIND_FORMAT && q.info.name == name && q.info.device.empty())
      fail("add_format: '", q.info.file, "' already provides format ", where(name, ""));
  Impl::Provider prov{{TANDEM_KIND_FORMAT, name, "", "(in-process)", "(in-process)", 1}, nullptr, nullptr, nullptr,
                      std::shared_ptr<void>(format, format.get())};
  impl_->providers.push_back(prov);
  impl_->infos.push_back(prov.info);
}

std::shared_ptr<void> PluginRegistry::create(tandem_kind kind, const std::string& name,
                                             const std::string& device) {
  const Impl::Provider* p = impl_->find(kind, name, device);
  if (!p)
    fail("no ", kind_name(kind), " plugin provides ", where(name, device), " (available: ",
         impl_->available(kind), ")");
  if (p->instance) return p->instance;
  void* obj = nullptr;
  char err[512] = {0};
  if (p->create(&obj, err, sizeof err) != TANDEM_OK || !obj)
    fail("plugin '", p->info.file, "': creating ", kind_name(kind), " '", name,
         "' failed: ", err[0] ? err : "no message");
  auto lib = p->lib;
  auto destroy = p->destroy;
  return std::shared_ptr<void>(obj, [lib, destroy](void* o) { destroy(o); });
}

// The objects were created as the interface type of their kind; the aliasing constructor keeps the
// library alive through the deleter.
std::shared_ptr<Backend> PluginRegistry::backend(const std::string& device) {
  auto o = create(TANDEM_KIND_BACKEND, device, device);
  return std::shared_ptr<Backend>(o, static_cast<Backend*>(o.get()));
}
std::shared_ptr<LayerFactory> PluginRegistry::layer(const std::string& name, const std::string& device) {
  auto o = create(TANDEM_KIND_LAYER, name, device);
  return std::shared_ptr<LayerFactory>(o, static_cast<LayerFactory*>(o.get()));
}
std::shared_ptr<LayerFactory> PluginRegistry::layer_for(LayerKind kind, const std::string& device) {
  std::vector<std::string> names;
  std::shared_ptr<LayerFactory> found;
  for (const auto& p : impl_->providers) {
    if (p.info.kind != TANDEM_KIND_LAYER || std::find(names.begin(), names.end(), p.info.name) != names.end() ||
        impl_->find(TANDEM_KIND_LAYER, p.info.name, device) != &p)
      continue;
    auto f = layer(p.info.name, device);
    if (f->kind() != kind) continue;
    names.push_back(p.info.name);
    found = f;
  }
  if (names.size() == 1) return found;
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "'" : ", '") + n + "'";
  fail("no layer plugin named for ", layer_kind_name(kind), " layers on device '", device, "' and ",
       names.empty() ? "none is loaded (available layer plugins: " + impl_->available(TANDEM_KIND_LAYER) + ")"
                     : "several are: " + list + " (name one in the profile)");
}
std::shared_ptr<WeightFormat> PluginRegistry::format(const std::string& name, const std::string& device) {
  auto o = create(TANDEM_KIND_FORMAT, name, device);
  return std::shared_ptr<WeightFormat>(o, static_cast<WeightFormat*>(o.get()));
}
std::shared_ptr<SpeculatorFactory> PluginRegistry::speculator(const std::string& name, const std::string& device) {
  auto o = create(TANDEM_KIND_SPECULATOR, name, device);
  return std::shared_ptr<SpeculatorFactory>(o, static_cast<SpeculatorFactory*>(o.get()));
}
std::shared_ptr<Writer> PluginRegistry::writer(const std::string& name) {
  auto o = create(TANDEM_KIND_WRITER, name, "");
  return std::shared_ptr<Writer>(o, static_cast<Writer*>(o.get()));
}
std::shared_ptr<Converter> PluginRegistry::converter(const std::string& name) {
  auto o = create(TANDEM_KIND_CONVERTER, name, "");
  return std::shared_ptr<Converter>(o, static_cast<Converter*>(o.get()));
}
std::vector<std::string> PluginRegistry::names(tandem_kind kind) const {
  std::vector<std::string> out;
  for (const auto& p : impl_->providers)
    if (p.info.kind == kind && std::find(out.begin(), out.end(), p.info.name) == out.end()) out.push_back(p.info.name);
  return out;
}
std::vector<std::pair<std::string, std::shared_ptr<WeightFormat>>> PluginRegistry::formats(const std::string& device) {
  std::vector<std::pair<std::string, std::shared_ptr<WeightFormat>>> out;
  for (const auto& p : impl_->providers)
    if (p.info.kind == TANDEM_KIND_FORMAT &&
        std::none_of(out.begin(), out.end(), [&](const auto& e) { return e.first == p.info.name; }))
      out.emplace_back(p.info.name, format(p.info.name, device));
  return out;
}

}  // namespace tandem
