// `tandem synth --shape S [--uniform] --mix M (--out PATH | --dry-run) [--seed N] [--shard-bytes N]`, or
// `tandem synth --shape S --drafter NAME [--drafter-set K=V,...] --out DIR [--seed N]`: a drafter
// checkpoint with random weights for a target of that shape, written by the drafter's plugin.
#include "cmd_synth.h"

#include <chrono>
#include <cstdio>
#include <algorithm>
#include <map>

#include "cli.h"
#include "synth_checkpoint.h"
#include "synth_model.h"
#include "synth_plan.h"
#include "synth_write.h"
#include "tandem/error.h"
#include "tandem/parallel.h"
#include "tandem/registry.h"
#include "tandem/speculator.h"

namespace tandem::cli {

const CommandSpec& synth_spec() {
  static const CommandSpec spec{
      "synth",
      "Write a model with random weights in a real shape and weight mix (no model options).",
      with_verbose_flag({
          {"shape", "tiny|nano|bolt|super", "the model's shape (required)"},
          {"uniform", "", "every layer the same kind (for per-layer timing)"},
          {"mix", "gguf-iq2|bf16|exl3-2|nvfp4|gguf-TYPE", "the weight types (required); gguf-TYPE: every linear but embedding and lm_head in one GGUF type (q8_0, q6_k, q5_k, q4_k, iq4_xs, iq4_nl, iq3_s, iq3_xxs, iq2_s, iq2_xs, iq2_xxs, iq1_m, nvfp4)"},
          {"out", "PATH", "the file (gguf-iq2, gguf-TYPE) or folder (bf16, exl3-2, nvfp4) to write; or --dry-run"},
          {"dry-run", "", "print the sizes only, write nothing"},
          {"seed", "S", "random seed (default 0)"},
          {"shard-bytes", "N", "largest safetensors shard (default 5e9)"},
          {"threads", "N", "worker threads (0: all cores)"},
          {"drafter", "NAME", "write a drafter checkpoint for the shape instead (lilicorr), into --out"},
          {"drafter-set", "K=V[,K=V...]", "drafter synthesis settings (lilicorr: geometry=tiny|bolt, "
                                          "names=export|serving, dtype=bf16|f32, head=true|false, "
                                          "quant=none|nvfp4|mlx-nvfp4, exclude=PATTERN|PATTERN…, embed=true|false)"},
      }), "", ""};
  return spec;
}

namespace {

int synth_drafter(const cli::Args& a) {
  check(a.has("shape") && a.has("out"), "tandem synth --drafter: --shape and --out are required");
  const ModelDesc target = synth::model_shape(a.str("shape"), a.flag("uniform"));
  const std::string name = a.str("drafter");
  std::map<std::string, std::string> values;
  const std::string list = a.str("drafter-set");
  for (size_t at = 0; at < list.size();) {
    const size_t end = std::min(list.find(',', at), list.size());
    const std::string kv = list.substr(at, end - at);
    at = end + 1;
    const size_t eq = kv.find('=');
    check(eq != std::string::npos && eq > 0, "tandem synth: --drafter-set expects KEY=VALUE, found '", kv, "'");
    values[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  SpeculatorSettings settings("--drafter-set", "", values);
  PluginRegistry reg;
  reg.load_default();
  reg.speculator(name)->synthesize(a.str("out"), target, settings, uint64_t(a.integer("seed", 0)));
  std::fprintf(stderr, "wrote a random %s drafter for %s (width %d, vocabulary %d, %zu layers) into %s\n",
               name.c_str(), a.str("shape").c_str(), target.hidden, target.vocab, target.layers.size(),
               a.str("out").c_str());
  return 0;
}

}  // namespace

int cmd_synth(const std::vector<std::string>& argv) {
  cli::Args a(argv, synth_spec());
  if (a.has("drafter")) return synth_drafter(a);
  check(a.has("shape") && a.has("mix") && (a.has("out") || a.flag("dry-run")),
        "tandem synth: --shape, --mix and --out (or --dry-run) are required");
  const synth::MixSpec mix = synth::parse_mix(a.str("mix"));
  const synth::Plan plan = synth::make_plan(synth::model_shape(a.str("shape"), a.flag("uniform")), mix);
  const uint64_t seed = uint64_t(a.integer("seed", 0));
  const long long shard = a.integer("shard-bytes", 5000000000LL);
  check(shard > 0, "tandem synth: --shard-bytes must be positive, found ", shard);
  const int threads = int(a.integer("threads", 0));
  check(threads >= 0, "tandem synth: --threads must be non-negative, found ", threads);
  set_thread_count(threads);

  const synth::Totals& t = plan.totals;
  std::fprintf(stderr, "%s%s %s: %zu layers (%s), %lld parameters (%lld active), %zu B of tensors, %zu B read per token\n",
               a.str("shape").c_str(), a.flag("uniform") ? " (uniform)" : "", plan.mix_label.c_str(),
               plan.desc.layers.size(), plan.desc.pattern().c_str(), (long long)t.params, (long long)t.active, t.bytes,
               t.decode_bytes);
  if (a.flag("dry-run")) {
    std::fprintf(stderr, "in memory (tandem bench --synth): %.2f GB of host memory\n",
                 double(synth::synth_host_bytes(plan)) * 1e-9);
    return 0;
  }
  auto bar = cli::progress_printer("writing " + a.str("out"));
  auto progress = [&](size_t done, size_t all) { bar(all ? double(done) / double(all) : 1.0); };
  const auto t0 = std::chrono::steady_clock::now();
  if (synth::is_gguf(plan.mix)) synth::write_gguf(plan, a.str("out"), seed, progress);
  else synth::write_hf_folder(plan, a.str("out"), seed, size_t(shard), progress);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "wrote %s in %.1f s (%.2f GB/s)\n", a.str("out").c_str(), s, double(t.bytes) * 1e-9 / s);
  return 0;
}

}  // namespace tandem::cli
