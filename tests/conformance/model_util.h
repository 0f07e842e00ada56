// Shared by the model-level tests: one registry of the built plugins, fixture models and prompts.
#pragma once
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tandem/model.h"
#include "tandem/registry.h"
#include "test_util.h"

namespace tandem::test {

inline PluginRegistry& registry() {
  static PluginRegistry* r = [] {
    auto* reg = new PluginRegistry();
    reg->load_directory(plugin_dir());
    return reg;
  }();
  return *r;
}

inline std::unique_ptr<Model> load_model(const std::string& path) {
  LoadOptions o;
  o.path = path;
  return Model::load(o, registry());
}

}  // namespace tandem::test
