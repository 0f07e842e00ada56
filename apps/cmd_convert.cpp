// `tandem convert --to NAME`: finds the converter a loaded plugin offers under NAME, reads the common
// options (calibration text, rows, seed, threads, force) and the converter's own, and runs it with a
// host that opens the input and runs the model for calibration (convert_calibration.h).
#include "cmd_convert.h"

#include <algorithm>
#include <memory>
#include <set>

#include "cli.h"
#include "convert_calibration.h"
#include "tandem/converter.h"
#include "tandem/error.h"
#include "tandem/model.h"
#include "tandem/parallel.h"
#include "tandem/registry.h"
#include "tandem/weights.h"

namespace tandem::cli {

namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}

// The input folder, opened on first use (after the converter has checked its output), and the model
// run over the calibration text.
class Host final : public ConvertHost {
 public:
  Host(PluginRegistry& reg, std::string input) : reg_(reg), input_(std::move(input)) {}
  PluginRegistry& registry() override { return reg_; }
  const Checkpoint& input() override {
    if (!ckpt_) {
      LoadOptions lo;
      lo.path = input_;
      lo.format = "safetensors";  // converters read HF folders
      ckpt_ = open_checkpoint(lo, reg_);
    }
    return *ckpt_;
  }
  Calibration calibrate(const std::string& text, const std::set<std::string>& linears, int64_t max_tokens,
                        int64_t sequence_tokens) override {
    return cli::calibrate(input_, text, linears, max_tokens, sequence_tokens, -1);
  }

 private:
  PluginRegistry& reg_;
  std::string input_;
  std::unique_ptr<Checkpoint> ckpt_;
};

}  // namespace

// The common flags, then every loaded converter's own.
CommandSpec convert_spec(PluginRegistry& reg) {
  const std::vector<std::string> names = reg.names(TANDEM_KIND_CONVERTER);
  std::string to;
  for (const auto& n : names) to += (to.empty() ? "" : "|") + n;
  std::vector<Flag> flags = {{"to", to.empty() ? "NAME" : to, "the output format (required; converters: " + joined(names) + ")"}};
  std::set<std::string> seen = {"to"};
  for (const auto& n : names)
    for (const ConverterOption& o : reg.converter(n)->options())
      if (seen.insert(o.name).second) flags.push_back({o.name, o.value, o.help});
  for (Flag f : std::vector<Flag>{
           {"calibration", "FILE", "text whose activations weight the quantization (default: none)"},
           {"rows", "N", "calibration tokens (default: the converter's)"},
           {"seed", "S", "random seed"},
           {"threads", "N", "worker threads (0: all cores)"},
           {"force", "", "overwrite OUTPUT_DIR"}})
    flags.push_back(f);
  return CommandSpec{"convert",
                     "Convert a BF16 safetensors folder to another format with the converter a plugin offers "
                     "(EXL3: routed experts at --bits, other linears at --other-bits when --bits < 4, lm_head at "
                     "--head-bits). An interrupted run resumes from OUTPUT_DIR.partial. MLX (--to mlx): INPUT is a GGUF "
                     "file, transcoded loss-free (IQ2_XXS, NVFP4, Q8_0 and floats).",
                     with_verbose_flag(flags), "INPUT_DIR OUTPUT_DIR", ""};
}

const CommandSpec& convert_spec() {
  static const CommandSpec spec = [] {
    PluginRegistry reg;
    reg.load_default();
    return convert_spec(reg);
  }();
  return spec;
}

int cmd_convert(const std::vector<std::string>& argv) {
  PluginRegistry reg;
  reg.load_default();
  const CommandSpec spec = convert_spec(reg);
  cli::Args a(argv, spec);
  const char* kSeeHelp = " (see 'tandem convert --help')";
  const std::vector<std::string> available = reg.names(TANDEM_KIND_CONVERTER);
  check(a.has("to"), "tandem convert: --to is required (converters: ", joined(available), ")", kSeeHelp);
  const std::string to = a.str("to");
  check(std::find(available.begin(), available.end(), to) != available.end(), "tandem convert: --to '", to,
        "' is not supported (no loaded plugin converts to it; converters: ", joined(available), ")");
  const std::shared_ptr<Converter> converter = reg.converter(to);
  const std::vector<std::string>& positional = a.positional();
  check(positional.size() == 2, "tandem convert: expected INPUT_DIR and OUTPUT_DIR, found ", positional.size(),
        " positional argument", positional.size() == 1 ? "" : "s", kSeeHelp);

  ConvertRequest r;
  r.input = positional[0], r.output = positional[1];
  std::set<std::string> own;
  for (const ConverterOption& o : converter->options()) {
    own.insert(o.name);
    if (a.has(o.name)) r.options[o.name] = a.str(o.name);
  }
  // Another converter's option given to this one is a mistake, not something to ignore.
  for (const Flag& f : spec.flags)
    if (!own.count(f.name) && a.has(f.name) &&
        !std::set<std::string>{"to", "calibration", "rows", "seed", "threads"}.count(f.name))
      fail("tandem convert: --", f.name, " is not an option of converter '", to, "'", kSeeHelp);
  converter->validate(r);
  r.calibration = a.str("calibration");
  r.rows = a.integer("rows", 0);
  check(!a.has("rows") || r.rows >= 1, "tandem convert: --rows must be at least 1, found ", a.str("rows"));
  check(!a.has("rows") || a.has("calibration"), "tandem convert: --rows needs --calibration FILE");
  r.seed = uint64_t(a.integer("seed", 0));
  const int threads = int(a.integer("threads", 0));
  check(threads >= 0, "tandem convert: --threads must be non-negative, found ", threads);
  set_thread_count(threads);
  r.force = a.flag("force");

  Host host(reg, r.input);
  converter->convert(r, host);
  return 0;
}

}  // namespace tandem::cli
