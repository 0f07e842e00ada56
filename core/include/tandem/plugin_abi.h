/* The plugin ABI: the only symbols a plugin exports. Plain C so that a plugin's entry point can be
 * found and checked before any C++ object crosses the boundary.
 * Owner: each plugin owns its static descriptor; objects made by `create` are owned by the caller and
 * freed with the matching `destroy`. Thread: the loader calls entry/score/init once, from one thread.
 * Sync: none; no exceptions cross these functions (status codes plus a message instead). */
#ifndef TANDEM_PLUGIN_ABI_H
#define TANDEM_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bump on any change to this header or to the C++ interfaces in core/include/tandem that objects
 * returned by `create` implement (backend.h, weights.h, layer.h, tensor.h, speculator.h, writer.h,
 * converter.h). 6 (2026-12-01): writer and converter kinds; Backend::copy, graphs_off_reason,
 * is_host; LayerFactory::kind; Speculator taps. 7 (2026-12-01): Backend lanes (fork, lane,
 * wait_lane, join), Graph node counts, fused matmul epilogues (QuantizedTensor::matmul_fused_raw,
 * ExpertSet::gather_matmul_fused). 8 (2026-12-02): Mixer::snapshot / restore (prefix checkpoints), Mixer::forward_batch (several
 * sequences in one pass). */
#define TANDEM_PLUGIN_ABI_VERSION 8u

enum tandem_kind {
  TANDEM_KIND_BACKEND = 1,    /* object: tandem::Backend */
  TANDEM_KIND_FORMAT = 2,     /* object: tandem::WeightFormat */
  TANDEM_KIND_LAYER = 3,      /* object: tandem::LayerFactory */
  TANDEM_KIND_SPECULATOR = 4, /* object: tandem::SpeculatorFactory */
  TANDEM_KIND_WRITER = 5,     /* object: tandem::Writer (optional: a format's container writer) */
  TANDEM_KIND_CONVERTER = 6   /* object: tandem::Converter (optional: `tandem convert --to NAME`) */
};

enum tandem_status { TANDEM_OK = 0, TANDEM_ERROR = 1 };

/* Creates the object a provider offers. Writes a NUL-terminated message into err on failure. */
typedef int (*tandem_create_fn)(void** out_object, char* err, size_t err_len);
typedef void (*tandem_destroy_fn)(void* object);

typedef struct tandem_provider {
  uint32_t kind;          /* enum tandem_kind */
  const char* name;       /* e.g. "cpu", "safetensors", "mamba2" */
  const char* device;     /* device the object runs on: "cpu", "cuda"; "" for device-neutral */
  tandem_create_fn create;
  tandem_destroy_fn destroy;
} tandem_provider;

typedef struct tandem_plugin_desc {
  uint32_t abi_version;   /* TANDEM_PLUGIN_ABI_VERSION the plugin was built with */
  uint32_t struct_size;   /* sizeof(tandem_plugin_desc) the plugin was built with */
  const char* name;       /* plugin name, e.g. "safetensors" */
  const char* version;    /* free-form, e.g. "0.1.0" */
  /* Optional (may be NULL): one-time initialization; a failure keeps the plugin from registering. */
  int (*init)(char* err, size_t err_len);
  uint32_t n_providers;
  const tandem_provider* providers;
} tandem_plugin_desc;

/* Required export. */
typedef const tandem_plugin_desc* (*tandem_plugin_entry_fn)(void);
/* Optional export: 0 = cannot run on this machine (e.g. no GPU); higher is better. */
typedef int (*tandem_plugin_score_fn)(void);

#ifdef __cplusplus
}
#endif

#if defined(__GNUC__)
#define TANDEM_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))
#define TANDEM_API __attribute__((visibility("default")))
#else
#define TANDEM_PLUGIN_EXPORT extern "C"
#define TANDEM_API
#endif

#endif
