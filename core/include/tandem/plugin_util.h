// Helpers for writing plugins: C-ABI factory functions that build a C++ object and turn exceptions
// into a status plus message, and the device fallback of a format built for one device.
// Owner: the caller of create owns the object until destroy. Thread: any. Sync: none.
#pragma once
#include <cstdio>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "tandem/backend.h"
#include "tandem/plugin_abi.h"
#include "tandem/weights.h"

namespace tandem {

inline void write_error(char* err, size_t len, const char* msg) {
  if (err && len) std::snprintf(err, len, "%s", msg);
}

// create/destroy pair for an interface I implemented by T (default-constructible).
template <class I, class T>
struct Factory {
  static int create(void** out, char* err, size_t len) {
    try {
      *out = static_cast<I*>(new T());
      return TANDEM_OK;
    } catch (const std::exception& e) {
      write_error(err, len, e.what());
    } catch (...) {
      write_error(err, len, "unknown error");
    }
    return TANDEM_ERROR;
  }
  static void destroy(void* p) { delete static_cast<I*>(p); }
};

// A format's module for one device, over its device-neutral format Host: reading the container and
// probing groups are Host's; weights go to load_on_device()/load_experts_on_device() when the backend
// runs on `device`, to Host for any other backend (a profile may load a CUDA-capable format on the
// CPU). A subclass states only what it adds on its device.
template <class Host>
class DeviceFormat : public WeightFormat {
 public:
  explicit DeviceFormat(std::string device) : device_(std::move(device)) {}

  int probe_path(const std::string& path) const override { return host_.probe_path(path); }
  std::unique_ptr<Checkpoint> open(const std::string& path) const override { return host_.open(path); }
  int probe_group(const TensorGroup& group) const override { return host_.probe_group(group); }

  std::unique_ptr<QuantizedTensor> load(const TensorGroup& group, Backend& backend) const final {
    return backend.device() == device_ ? load_on_device(group, backend) : host_.load(group, backend);
  }
  std::unique_ptr<ExpertSet> load_experts(const std::vector<TensorGroup>& groups, Backend& backend) const final {
    return backend.device() == device_ ? load_experts_on_device(groups, backend) : host_.load_experts(groups, backend);
  }

 protected:
  virtual std::unique_ptr<QuantizedTensor> load_on_device(const TensorGroup& group, Backend& backend) const = 0;
  virtual std::unique_ptr<ExpertSet> load_experts_on_device(const std::vector<TensorGroup>& groups,
                                                            Backend& backend) const = 0;
  const Host& host() const { return host_; }

 private:
  std::string device_;
  Host host_;
};

}  // namespace tandem
